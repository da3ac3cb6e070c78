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

  // -- the overview's charts -------------------------------------------------
  function charts(box) {
    const url = box.dataset.series;
    const shown = new Map(); // queue -> {plot, data: [t, ready, outstanding, in, out]}
    let last = 0;
    const opts = (title) => ({
      title: title,
      width: 320,
      height: 150,
      legend: { show: false },
      scales: { x: { time: true }, n: {}, r: {} },
      axes: [{}, { scale: "n", size: 40 }, { scale: "r", side: 1, size: 40, grid: { show: false } }],
      series: [
        {},
        { label: "waiting", scale: "n", stroke: "#1f77b4", width: 1.5 },
        { label: "outstanding", scale: "n", stroke: "#ff7f0e", width: 1.5 },
        { label: "in /s", scale: "r", stroke: "#2ca02c", width: 1, dash: [4, 2] },
        { label: "out /s", scale: "r", stroke: "#d62728", width: 1, dash: [4, 2] },
      ],
    });
    function add(name) {
      const cell = document.createElement("figure");
      cell.className = "chart";
      cell.dataset.queue = name;
      cell.appendChild(text("figcaption", name));
      box.appendChild(cell);
      const data = [[], [], [], [], []];
      const plot = new uPlot(opts(""), data, cell);
      const entry = { plot, data, cell };
      shown.set(name, entry);
      return entry;
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
      if (last === 0) {
        for (const [name, e] of shown) { e.plot.destroy(); e.cell.remove(); shown.delete(name); }
      }
      for (const name of Object.keys(got.queues)) {
        const q = got.queues[name];
        const e = shown.get(name) || add(name);
        const cols = [t, q.ready, q.outstanding, q.in, q.out];
        for (let k = 0; k < 5; k++) e.data[k].push(...cols[k]);
        if (t.length) {
          const cut = t[t.length - 1] - HOUR;
          let n = 0;
          while (n < e.data[0].length && e.data[0][n] < cut) n++;
          if (n) for (let k = 0; k < 5; k++) e.data[k].splice(0, n);
        }
        e.plot.setData(e.data);
      }
      for (const [name, e] of shown) {
        if (!(name in got.queues) && last !== 0 && t.length) {
          e.plot.destroy(); e.cell.remove(); shown.delete(name);
        }
      }
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
    const source = new EventSource(body.dataset.stream + "?after=" + body.dataset.after);
    source.addEventListener("sys", (m) => {
      const e = JSON.parse(m.data);
      const row = document.createElement("tr");
      row.appendChild(text("td", String(e.seq)));
      row.appendChild(text("td", when(e.at), "time"));
      row.appendChild(text("td", e.name, "event"));
      row.appendChild(text("td", e.fields.join(" · ")));
      body.appendChild(row);
      while (body.rows.length > 500) body.deleteRow(0);
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

  document.addEventListener("DOMContentLoaded", () => {
    const box = document.getElementById("charts");
    if (box) charts(box);
    const body = document.getElementById("events");
    if (body && body.dataset.stream) events(body);
  });
})();
