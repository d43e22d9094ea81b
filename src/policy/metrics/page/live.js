"use strict";
// The live status page: reads the JSON status (docs/METRICS.md) from this same endpoint every
// second and shows it; its buttons are the endpoint's key operations. Key and client texts
// come from clients' requests: they are only ever set as text.
(() => {
  const base = location.pathname;
  const RECENT = 10; // seconds the rates and the "rejecting" mark look back over
  const KINDS = ["passed", "delayed", "rejected"];
  const $ = (sel) => document.querySelector(sel);
  let cards = new Map(); // limit name -> its card's parts
  let shape = ""; // the limits' names, to rebuild the cards when a reload changes them
  let prev = null; // the engine's counts at the last refresh, for its request rate

  /** Per-second rate of the last RECENT whole seconds of `a` (its last entry: the current second). */
  function rate(a) {
    let sum = 0, known = 0;
    for (let i = Math.max(0, a.length - 1 - RECENT); i < a.length - 1; i++) {
      if (a[i] !== null) { sum += a[i]; known++; }
    }
    return known ? (sum / known).toFixed(1) : "–";
  }

  function ms(v) {
    return typeof v === "number" ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : "–";
  }

  function recent(a) {
    return a.slice(-RECENT - 1).some((v) => v > 0);
  }

  function button(action, limit, key) {
    return weirEl("button", { type: "button", "data-action": action, "data-limit": limit, "data-key": key }, action);
  }

  function table(cls, limit, window, caption, head, rows, empty) {
    const t = weirEl("table", { class: cls, "data-limit": limit, "data-window": window });
    t.append(weirEl("caption", {}, caption));
    t.append(weirEl("thead", {}, weirEl("tr", {}, ...head.map((h) => weirEl("th", {}, h)))));
    const body = weirEl("tbody");
    if (rows.length) body.append(...rows);
    else body.append(weirEl("tr", {}, weirEl("td", { class: "empty", colSpan: head.length }, empty)));
    t.append(body);
    return t;
  }

  function keyRows(limit, keys) {
    return keys.map((k) => weirEl("tr", { "data-key": k.key },
      weirEl("td", { class: "key" }, k.key), weirEl("td", { class: "count" }, k.rejected),
      weirEl("td", { class: "actions" }, button("inspect", limit, k.key), " ", button("reset", limit, k.key))));
  }

  function clientRows(clients) {
    return clients.map((c) => weirEl("tr", { "data-client": c.client },
      weirEl("td", { class: "client" }, c.client), weirEl("td", { class: "count" }, c.rejected)));
  }

  function card(l) {
    const rates = {};
    const art = weirEl("article", { class: "limit", "data-limit": l.name });
    art.append(weirEl("h3", {}, l.name));
    const row = weirEl("div", { class: "rates" });
    for (const k of KINDS) {
      rates[k] = weirEl("b", { "data-rate": k }, "–");
      row.append(weirEl("span", { class: k }, rates[k], weirEl("small", {}, k + " /s")));
    }
    const totals = weirEl("span", { class: "muted totals" });
    row.append(totals);
    const chart = weirEl("div", { class: "chart" });
    const capacity = weirEl("div", { class: "capacity-slot" });
    const tables = weirEl("div", { class: "tables" });
    art.append(row, weirLegend(KINDS), chart, capacity, tables);
    return { art, rates, totals, chart, capacity, tables, plot: null, kept: new Map() };
  }

  function capacityPart(l) {
    const c = l.capacity;
    const full = c.limit > 0 && c.in_flight >= c.limit;
    const art = weirEl("article", { class: "capacity" + (full ? " saturated" : ""), "data-limit": l.name });
    const meter = weirEl("div", { class: "meter" }, weirEl("div"));
    meter.firstChild.style.width = Math.min(100, c.limit ? (100 * c.in_flight) / c.limit : 0) + "%";
    const dd = (field, v) => weirEl("dd", { "data-field": field }, v);
    art.append(
      weirEl("h3", {}, "concurrency"), meter,
      weirEl("dl", {},
        weirEl("dt", {}, "in flight"), dd("in_flight", c.in_flight),
        weirEl("dt", {}, c.auto ? "limit (learned)" : "limit"), dd("limit", c.limit),
        weirEl("dt", {}, "queued"), dd("queued", c.queued),
        weirEl("dt", {}, "latency"),
        dd("latency_ms", `${ms(c.latency_ms)} (no load: ${ms(c.noload_latency_ms)})`),
        weirEl("dt", {}, "refused by lane"),
        dd("shed", c.shed ? `critical ${c.shed.critical}, normal ${c.shed.normal}, sheddable ${c.shed.sheddable}` : "–")));
    return art;
  }

  function update(l, now) {
    let c = cards.get(l.name);
    const ps = l.per_second;
    for (const k of KINDS) weirFill(c.rates[k], rate(ps[k]));
    c.art.classList.toggle("rejecting", recent(ps.rejected));
    weirFill(c.totals, `total: ${l.passed} passed, ${l.delayed} delayed, ${l.rejected} rejected` +
      (l.banned ? `, ${l.banned} banned` : "") + (l.queued ? `, ${l.queued} queued` : ""));
    // The chart starts at the first second with traffic (at most 15 minutes back, at least
    // 2): a host that just started is not a sliver at the right edge.
    const n = ps.rejected.length;
    let from = KINDS.map((k) => ps[k].findIndex((v) => v > 0)).filter((i) => i >= 0).reduce((a, b) => Math.min(a, b), n);
    from = Math.max(0, Math.min(from, n - 120));
    const data = [Array.from({ length: n - from }, (_, i) => now - (n - 1 - from - i))]
      .concat(KINDS.map((k) => ps[k].slice(from)));
    if (!c.plot) c.plot = weirChart(c.chart, KINDS, data);
    else c.plot.setData(data);
    weirFill(c.capacity, ...(l.capacity ? [capacityPart(l)] : []));
    // A table is built anew only when its rows change, so that a button is not replaced
    // under the pointer.
    const parts = [];
    const keep = (id, data, build) => {
      const sig = JSON.stringify(data);
      const old = c.kept.get(id);
      const t = old && old.sig === sig ? old.t : build();
      c.kept.set(id, { sig, t });
      parts.push(t);
      return t;
    };
    if (l.bans) {
      const t = keep("bans", l.bans.map((b) => b.key), () => table("bans", l.name, "now", "active bans",
        ["key", "left (s)", ""], l.bans.map((b) => weirEl("tr", { "data-key": b.key },
          weirEl("td", { class: "key" }, b.key), weirEl("td", { class: "remaining" }),
          weirEl("td", { class: "actions" }, button("inspect", l.name, b.key), " ", button("unban", l.name, b.key)))),
        "no ban"));
      l.bans.forEach((b, i) => {
        const row = t.tBodies[0].rows[i];
        if (row) weirFill(row.cells[1], b.remaining_s);
      });
    }
    for (const [w, win] of [["1m", l.last_1m], ["15m", l.last_15m]]) {
      const label = w === "1m" ? "last minute" : "last 15 minutes";
      keep("keys" + w, win.keys, () => table("keys", l.name, w, `top keys, ${label}`, ["key", "rejected", ""],
        keyRows(l.name, win.keys), "none rejected"));
      keep("clients" + w, win.clients, () => table("clients", l.name, w, `top clients, ${label}`,
        ["client", "rejected"], clientRows(win.clients), "none rejected"));
    }
    if (parts.some((t, i) => c.tables.children[i] !== t) || c.tables.children.length !== parts.length) {
      weirFill(c.tables, ...parts);
    }
  }

  function clusters(list) {
    weirFill($("#clusters"), ...(list.length ? [weirEl("h2", {}, "cluster zones"), weirEl("div", { class: "grid" },
      ...list.map((z) => weirEl("article", { class: "cluster" + (z.fallback_active ? " fallback" : ""), "data-zone": z.name },
        weirEl("h3", {}, z.name + (z.fallback_active ? " — on its fallback share (Redis away)" : "")),
        weirEl("dl", {},
          weirEl("dt", {}, "last sync"), weirEl("dd", { "data-field": "sync_age_ms" }, `${z.sync_age_ms} ms ago`),
          weirEl("dt", {}, "share / demand / in flight"), weirEl("dd", {}, `${z.share} / ${z.demand} / ${z.in_flight}`),
          weirEl("dt", {}, "keys leased"), weirEl("dd", {}, z.leased_keys),
          weirEl("dt", {}, "syncs, errors"), weirEl("dd", {}, `${z.syncs}, ${z.sync_errors}`),
          weirEl("dt", {}, "fallback decisions"), weirEl("dd", { "data-field": "fallback_decisions" }, z.fallback_decisions))))
    )] : []));
  }

  function zones(list) {
    weirFill($("#zones"), ...(list.length ? [weirEl("h2", {}, "zones"), table("zones", "", "now", "",
      ["zone", "keys", "fill", "evicted while active", "longest probe"],
      list.map((z) => weirEl("tr", { "data-zone": z.name }, weirEl("td", {}, z.name), weirEl("td", {}, z.occupancy),
        weirEl("td", {}, z.capacity ? (100 * z.occupancy / z.capacity).toFixed(1) + "%" : "–"),
        weirEl("td", {}, z.evictions_active), weirEl("td", {}, z.longest_probe))), "")] : []));
  }

  function render(s) {
    const now = Math.floor(Date.now() / 1000);
    const names = s.limits.map((l) => l.name).join("\n");
    if (names !== shape) {
      shape = names;
      cards = new Map(s.limits.map((l) => [l.name, card(l)]));
      weirFill($("#limits"), ...(s.limits.length ? [...cards.values()].map((c) => c.art)
        : [weirEl("p", { class: "empty" }, "no limits (no policy)")]));
    }
    for (const l of s.limits) update(l, now);
    clusters(s.clusters || []);
    zones(s.zones || []);
    const e = s.engine;
    if (e) {
      const t = Date.now();
      const rps = prev ? ((e.requests - prev.requests) * 1000 / Math.max(1, t - prev.t)).toFixed(0) : "–";
      prev = { requests: e.requests, t };
      weirFill($("#engine"), `${rps} requests/s · ${e.requests} requests, ${e.exempt} exempt, ` +
        `${e.unmatched} unmatched, ${e.bad_target} bad targets`);
    }
  }

  async function refresh() {
    try {
      const r = await fetch(base + "?format=json", { cache: "no-store", credentials: "same-origin" });
      if (!r.ok) throw new Error(`${r.status} ${r.statusText}`);
      render(await r.json());
      document.body.dataset.state = "live";
      weirFill($("#error"));
      weirFill($("#updated"), "updated " + new Date().toLocaleTimeString());
    } catch (e) {
      document.body.dataset.state = "error";
      weirFill($("#error"), "cannot read the status: " + e.message);
    }
    setTimeout(refresh, 1000);
  }

  async function act(b) {
    const { action, limit, key } = b.dataset;
    const q = `?limit=${encodeURIComponent(limit)}&key=${encodeURIComponent(key)}`;
    const init = { cache: "no-store", credentials: "same-origin" };
    if (action !== "inspect") {
      Object.assign(init, { method: "POST", headers: { "Weir-Key-Action": action } });
    }
    const box = $("#action-result");
    try {
      const r = await fetch(base + q + (action === "inspect" ? "" : `&action=${action}`), init);
      const text = (await r.text()).trim();
      box.className = r.ok ? "ok" : "refused";
      box.dataset.status = r.status;
      weirFill(box, `${r.ok ? "" : `${r.status} ${r.statusText || "refused"}: `}${action} ${limit} ${key}\n${text}`);
    } catch (e) {
      box.className = "refused";
      box.dataset.status = "0";
      weirFill(box, `${action} ${limit} ${key}: no answer (${e.message})`);
    }
  }

  // The charts take the theme's colours when drawn: draw them anew when it changes.
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
    for (const c of cards.values()) {
      if (c.plot) c.plot.destroy();
      c.plot = null;
      weirFill(c.chart);
    }
  });
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-action]");
    if (b) act(b);
  });
  refresh();
})();
