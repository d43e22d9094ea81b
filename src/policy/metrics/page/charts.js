"use strict";
// Charts of passed, delayed and rejected requests over time, shared by the status page and
// the replay report (uPlot). Every text they show is set as text, never as HTML.

/** A CSS custom property of the page's theme. */
function weirVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** Sets a node's children: strings become text nodes. */
function weirFill(node, ...kids) {
  node.replaceChildren(...kids.map((k) => (k instanceof Node ? k : document.createTextNode(String(k)))));
  return node;
}

/** An element with attributes (`class`, `data-*`, properties) and children (text or nodes). */
function weirEl(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-")) e.setAttribute(k, String(v));
    else e[k] = v;
  }
  return kids.length ? weirFill(e, ...kids) : e;
}

/** The series' colours, from the theme. */
const WEIR_SERIES = {
  passed: "--pass", delayed: "--delay", rejected: "--reject", queued: "--delay", dry_run_rejected: "--dry",
};

/**
 * A time chart in `el` of the named series (`names`, keys of WEIR_SERIES). `data`: the time
 * axis (Unix seconds) then one array per name (null: unknown). Resizes with its element.
 */
function weirChart(el, names, data) {
  const muted = weirVar("--muted"), grid = weirVar("--grid");
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  const opts = {
    width: Math.max(200, el.clientWidth || 600),
    height: 160,
    legend: { show: false },
    cursor: { drag: { x: false, y: false }, points: { show: false } },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max || 0)] } },
    axes: [axis, Object.assign({ size: 60 }, axis)],
    series: [{}].concat(names.map((n) => {
      const c = weirVar(WEIR_SERIES[n]);
      return { label: n, stroke: c, fill: c + "26", width: 1.5, points: { show: false } };
    })),
  };
  const u = new uPlot(opts, data, el);
  new ResizeObserver(() => {
    const w = Math.max(200, el.clientWidth);
    if (Math.abs(w - u.width) > 2) u.setSize({ width: w, height: 160 });
  }).observe(el);
  return u;
}

/** A legend of the named series (coloured by the style sheet, so it follows the theme). */
function weirLegend(names) {
  return weirEl("div", { class: "rates legend" },
    ...names.map((n) => weirEl("span", {}, weirEl("span", { class: "swatch " + n }), n.replace(/_/g, " "))));
}
