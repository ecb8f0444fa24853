// Every <table class="explore">: a search box, a filter per column marked data-filter, sorting by
// a click on any heading, and "N of M" shown (one count per table, id "shown" on the first).
(function () {
  "use strict";
  document.querySelectorAll("table.explore").forEach((table, index) => {
    const head = table.rows[0];
    const body = Array.from(table.rows).slice(1).filter((r) => !r.querySelector("td[colspan]"));
    const bar = document.createElement("p");
    const search = document.createElement("input");
    search.placeholder = "search";
    const count = document.createElement("span");
    if (index === 0) count.id = "shown";
    bar.append(search, " ", count, " shown");
    const selects = [];
    Array.from(head.cells).forEach((th, col) => {
      if (th.dataset.filter === undefined) return;
      const select = document.createElement("select");
      const values = [...new Set(body.map((r) => r.cells[col].textContent))].sort();
      select.innerHTML = `<option value="">every ${th.textContent}</option>` +
        values.map((v) => `<option>${v.replace(/&/g, "&amp;").replace(/</g, "&lt;")}</option>`).join("");
      select.dataset.col = col;
      select.addEventListener("change", update);
      selects.push(select);
      bar.append(" ", select);
    });
    table.before(bar);
    function update() {
      const q = search.value.toLowerCase();
      let shown = 0;
      for (const row of body) {
        const ok = (!q || row.textContent.toLowerCase().includes(q)) &&
          selects.every((s) => !s.value || row.cells[+s.dataset.col].textContent === s.value);
        row.hidden = !ok;
        shown += ok;
      }
      count.textContent = `${shown} of ${body.length}`;
    }
    search.addEventListener("input", update);
    Array.from(head.cells).forEach((th, col) => {
      th.style.cursor = "pointer";
      th.addEventListener("click", () => {
        const dir = th.dataset.dir === "asc" ? "desc" : "asc";
        th.dataset.dir = dir;
        const key = (r) => { const t = r.cells[col].textContent; const n = parseFloat(t.replace(/,/g, "")); return isNaN(n) ? t : n; };
        body.sort((a, b) => { const x = key(a), y = key(b); const c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1); return dir === "asc" ? c : -c; });
        body.forEach((r) => r.parentNode.appendChild(r));
      });
    });
    update();
  });
})();
