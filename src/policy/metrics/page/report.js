"use strict";
// The replay report (`weir replay --html`): the same cards and charts as the status page, drawn
// from the report's data block instead of the live JSON status. Texts are set as text only.
(() => {
  const d = JSON.parse(document.getElementById("data").textContent);
  const r = d.report, tl = d.timeline;
  const SERIES = ["passed", "rejected", "dry_run_rejected"];
  const main = document.querySelector("main");
  const num = (v) => Number(v).toLocaleString("en-US");

  weirFill(document.getElementById("summary"),
    `${num(r.requests)} requests from ${r.first_time || "–"} to ${r.last_time || "–"} (UTC): ` +
    `${num(r.passed)} passed, ${num(r.delayed)} delayed, ${num(r.rejected)} rejected, ${num(r.queued)} queued, ` +
    `${num(r.exempt)} exempt, ${num(r.unmatched)} unmatched. One point: ${tl.width_s} s ` +
    "(passed includes delayed; rejected includes queued).");

  const cols = ["passed", "delayed", "rejected", "queued", "dry_run_rejected"];
  const t = weirEl("table", { class: "summary" });
  t.append(weirEl("thead", {}, weirEl("tr", {}, weirEl("th", {}, "limit"), ...cols.map((c) => weirEl("th", {}, c.replace(/_/g, " "))))));
  const body = weirEl("tbody");
  for (const l of r.limits) {
    body.append(weirEl("tr", { "data-limit": l.name }, weirEl("td", {}, l.name), ...cols.map((c) => weirEl("td", {}, num(l[c])))));
  }
  t.append(body);
  main.append(t);

  const grid = weirEl("section", { class: "grid" });
  main.append(grid);
  r.limits.forEach((l, i) => {
    const b = tl.buckets[i] || [];
    const art = weirEl("article", { class: "limit" + (l.rejected > 0 ? " rejecting" : ""), "data-limit": l.name });
    art.append(weirEl("h3", {}, l.name),
      weirEl("p", { class: "muted" }, `zone ${l.zone}, key ${l.key}${l.dry_run ? ", dry run" : ""}`),
      weirLegend(SERIES));
    const chart = weirEl("div", { class: "chart" });
    art.append(chart);
    const rows = (list) => list.map((k) => weirEl("tr", { "data-key": k.key },
      weirEl("td", { class: "key" }, k.key), weirEl("td", { class: "count" }, num(k.rejected) + (k.error ? ` (±${num(k.error)})` : ""))));
    const tables = weirEl("div", { class: "tables" });
    for (const [cls, caption, list] of [["keys", "top rejected keys", l.top_keys], ["clients", "top rejected clients", l.top_clients]]) {
      const tb = weirEl("table", { class: cls, "data-limit": l.name });
      tb.append(weirEl("caption", {}, caption), weirEl("tbody", {}, ...(list.length ? rows(list)
        : [weirEl("tr", {}, weirEl("td", { class: "empty" }, "none rejected"))])));
      tables.append(tb);
    }
    art.append(tables);
    grid.append(art);
    const x = b.map((_, j) => tl.start_s + j * tl.width_s);
    weirChart(chart, SERIES, [x, b.map((v) => v[0]), b.map((v) => v[1]), b.map((v) => v[2])]);
  });
  document.body.dataset.state = "report";
})();
