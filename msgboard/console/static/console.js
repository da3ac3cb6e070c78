// The console's own script: the overview's charts (uPlot) and the live
// events (EventSource). Everything from the board is put in the page as
// text (textContent), never as markup.
"use strict";
(function () {
  const every = Number(document.body.dataset.every || 5000);
  const HOUR = 3600;

  function text(tag, value, cls) {
    const el = document.createElement(tag);
    el.textContent = value;
    if (cls) el.className = cls;
    return el;
  }

  // -- the overview's chart -------------------------------------------------
  // One chart: the messages on each of the TOP busiest queues (most messages
  // in and out over the hour kept, then the deepest), a line each, named in
  // its legend. Every queue's readings are kept (fetched once, then only
  // the readings after the last one); the chart is redrawn when the
  // busiest change.
  const TOP = 8;
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  function charts(box) {
    const url = box.dataset.series;
    const times = [];
    const queues = new Map(); // queue -> {depth: [], moved: []} (aligned with times)
    let last = 0;
    let plot = null;
    let drawn = "";
    const figure = document.createElement("figure");
    figure.className = "chart busiest";
    const caption = text("figcaption", "");
    figure.appendChild(caption);
    box.appendChild(figure);
    function sum(a) {
      let n = 0;
      for (const v of a) if (v !== null) n += v;
      return n;
    }
    function busiest() {
      const score = [];
      for (const [name, q] of queues) {
        const depth = q.depth.length ? q.depth[q.depth.length - 1] || 0 : 0;
        score.push([sum(q.moved), depth, name]);
      }
      score.sort((a, b) => b[0] - a[0] || b[1] - a[1] || (a[2] < b[2] ? -1 : 1));
      return score.slice(0, TOP).map((x) => x[2]);
    }
    function draw() {
      const top = busiest();
      const key = top.join("\u0000");
      const data = [times, ...top.map((n) => queues.get(n).depth)];
      caption.textContent = top.length
        ? "Messages on the " + top.length + " busiest of " + queues.size +
          " charted queues (most in and out in the last hour)"
        : "No queue to chart yet";
      figure.dataset.queues = top.join(",");
      if (plot && key === drawn) { plot.setData(data); return; }
      if (plot) plot.destroy();
      drawn = key;
      plot = new uPlot({
        width: Math.max(480, Math.min(1200, box.clientWidth || 960)),
        height: 260,
        legend: { show: true, live: false },
        scales: { x: { time: true } },
        axes: [{}, { size: 50 }],
        series: [{}, ...top.map((n, k) => ({ label: n, stroke: COLOURS[k % COLOURS.length], width: 1.5 }))],
      }, data, figure);
    }
    async function tick() {
      let got;
      try {
        const r = await fetch(url + "?since=" + last, { credentials: "same-origin" });
        if (!r.ok) return;
        got = await r.json();
      } catch (e) {
        return;
      }
      const t = got.t;
      if (last === 0) { times.length = 0; queues.clear(); }
      const before = times.length;
      times.push(...t);
      for (const name of Object.keys(got.queues)) {
        const q = got.queues[name];
        let e = queues.get(name);
        if (!e) {
          e = { depth: new Array(before).fill(null), moved: new Array(before).fill(null) };
          queues.set(name, e);
        }
        for (let k = 0; k < t.length; k++) {
          const r = q.ready[k], o = q.outstanding[k];
          e.depth.push(r === null && o === null ? null : (r || 0) + (o || 0));
          const i = q.in[k], out = q.out[k];
          e.moved.push(i === null && out === null ? null : (i || 0) + (out || 0));
        }
      }
      for (const [name, e] of queues) {
        if (t.length && !(name in got.queues)) { queues.delete(name); continue; }
        while (e.depth.length < times.length) { e.depth.push(null); e.moved.push(null); }
      }
      if (times.length) {
        const cut = times[times.length - 1] - HOUR;
        let n = 0;
        while (n < times.length && times[n] < cut) n++;
        if (n) {
          times.splice(0, n);
          for (const e of queues.values()) { e.depth.splice(0, n); e.moved.splice(0, n); }
        }
      }
      if (t.length || last === 0) draw();
      if (t.length) last = t[t.length - 1];
      box.dataset.readings = String(last);
    }
    tick();
    setInterval(tick, every);
  }

  // -- the live events -------------------------------------------------------
  function when(ms) {
    return new Date(Number(ms)).toISOString().replace("T", " ").replace("Z", "");
  }

  function events(body) {
    for (const cell of body.querySelectorAll("td.time")) cell.textContent = when(cell.dataset.ms);
    const query = new URLSearchParams({
      after: body.dataset.after, kind: body.dataset.kind || "", queue: body.dataset.queue || "",
    });
    const source = new EventSource(body.dataset.stream + "?" + query.toString());
    source.addEventListener("sys", (m) => {
      const e = JSON.parse(m.data);
      const row = document.createElement("tr");
      row.dataset.seq = String(e.seq);
      row.appendChild(text("td", String(e.seq)));
      row.appendChild(text("td", when(e.at), "time"));
      row.appendChild(text("td", e.name, "event"));
      const cell = text("td", "", "fields");
      for (const [k, v] of e.named) {
        const f = text("span", "", "field");
        f.appendChild(text("span", k, "key"));
        f.appendChild(document.createTextNode(" " + v));
        if (cell.firstChild) cell.appendChild(document.createTextNode(" "));
        cell.appendChild(f);
      }
      row.appendChild(cell);
      body.prepend(row); // the newest first
      while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
    });
  }

  // A form with data-confirm asks first (kick, release): the question is
  // the attribute's text; cancelled, nothing is sent.
  document.addEventListener("submit", (e) => {
    const form = e.target;
    const question = form instanceof HTMLFormElement ? form.dataset.confirm : undefined;
    if (question && !window.confirm(question)) e.preventDefault();
  });

  // Compose: the message part and Post show for a queue one may write.
  document.addEventListener("change", (e) => {
    const select = e.target;
    if (!(select instanceof HTMLSelectElement) || select.id !== "queue") return;
    const option = select.selectedOptions[0];
    const writable = !!(option && option.dataset.write);
    const part = document.getElementById("post-part");
    if (part) part.hidden = !writable;
    const none = document.getElementById("no-post");
    if (none) none.hidden = writable;
  });

  // A request htmx makes that is refused (403, 404...): its reason shown
  // at the top of the page, as text.
  document.addEventListener("htmx:responseError", (e) => {
    const xhr = e.detail && e.detail.xhr;
    if (!xhr) return;
    let flash = document.getElementById("flash");
    if (!flash) {
      flash = document.createElement("p");
      flash.id = "flash";
      flash.className = "error";
      const main = document.querySelector("main");
      if (main) main.prepend(flash);
    }
    flash.textContent = xhr.status + ": " + xhr.responseText;
  });

  // -- saved filters ----------------------------------------------------------
  // Named patterns (templates, address, filter) a person keeps for the
  // pattern forms (Browse, Dead letters, Compose), in this browser's
  // localStorage under one key: no write to the board, nothing to guard
  // there, and they survive the board's restarts (docs/console.md).
  const SAVED = "msgboard.console.filters";
  function savedAll() {
    try {
      const got = JSON.parse(window.localStorage.getItem(SAVED) || "{}");
      return got && typeof got === "object" ? got : {};
    } catch (e) {
      return {};
    }
  }
  function savedFilters(box) {
    const set = box.closest("fieldset");
    const field = (name) => set.querySelector('[name$="' + name + '"]');
    const pick = box.querySelector(".saved-pick");
    const name = box.querySelector(".saved-name");
    function fill() {
      const all = savedAll();
      while (pick.options.length > 1) pick.remove(1);
      for (const key of Object.keys(all).sort()) pick.appendChild(new Option(key, key));
    }
    pick.addEventListener("change", () => {
      const p = savedAll()[pick.value];
      if (!p) return;
      field("template").value = p.template || "";
      field("address").value = p.address || "";
      field("filter").value = p.filter || "";
      name.value = pick.value;
    });
    box.querySelector(".saved-save").addEventListener("click", () => {
      const key = name.value.trim();
      if (!key) { name.focus(); return; }
      const all = savedAll();
      all[key] = {
        template: field("template").value, address: field("address").value, filter: field("filter").value,
      };
      window.localStorage.setItem(SAVED, JSON.stringify(all));
      fill();
      pick.value = key;
    });
    box.querySelector(".saved-forget").addEventListener("click", () => {
      const all = savedAll();
      if (!pick.value || !(pick.value in all)) return;
      delete all[pick.value];
      window.localStorage.setItem(SAVED, JSON.stringify(all));
      fill();
    });
    fill();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const box = document.getElementById("charts");
    if (box) charts(box);
    const body = document.getElementById("events");
    if (body && body.dataset.stream) events(body);
    for (const box of document.querySelectorAll("[data-saved-filters]")) savedFilters(box);
  });
})();
