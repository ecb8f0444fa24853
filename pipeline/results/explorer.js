// The case table of report.html: filters, search, sorting, the view in the URL fragment, and
// one case's own view. Plain JS, no library; the data is the JSON in <script id="cases">.
// A link with a view (opening the page with a fragment, or a fragment changed later) lands on
// it: scrolled to the open case, else to the table's heading; a page without one stays at its top.
(function () {
  "use strict";
  const cases = JSON.parse(document.getElementById("cases").textContent);
  const FILTERS = ["target", "flavor", "category", "status", "bucket"];
  const COLUMNS = [  // [key, heading, numeric]
    ["case", "case", false], ["flavor", "flavor", false], ["status", "status", false],
    ["stage", "stage", false], ["ratio", "error / tolerance", true], ["macs", "MACs", true],
    ["rate", "MAC rate", true], ["compile", "compile s", true], ["vmfb", ".vmfb bytes", true]];
  const LIMIT = 500;  // rows drawn at once; the count says how many match
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const num = (v) => (v === null || v === undefined) ? "" : (Math.abs(v) >= 1e4 ? v.toLocaleString("en") : String(+v.toPrecision(4)));

  function state() {
    const out = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      if (!part) continue;
      const i = part.indexOf("=");
      out[decodeURIComponent(i < 0 ? part : part.slice(0, i))] = i < 0 ? "" : decodeURIComponent(part.slice(i + 1));
    }
    return out;
  }

  function known(s) {  // the fragment names a view: a filter, a search, a sort or a case
    return [...FILTERS, "q", "sort", "case"].some((k) => s[k]);
  }

  function land() {
    const s = state();
    if (!known(s)) return;
    const box = $("case-view");
    (s.case && !box.hidden ? box : $("cases-heading")).scrollIntoView({block: "start"});
  }

  function setState(next) {
    const parts = Object.keys(next).filter((k) => next[k] !== "" && next[k] !== undefined)
      .map((k) => encodeURIComponent(k) + "=" + encodeURIComponent(next[k]));
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
    render();
  }

  function controls() {
    const box = $("filters");
    for (const key of FILTERS) {
      const values = [...new Set(cases.map((c) => c[key]).filter((v) => v))].sort();
      const select = document.createElement("select");
      select.id = "filter-" + key;
      select.innerHTML = `<option value="">every ${key}</option>` +
        values.map((v) => `<option value="${esc(v)}">${esc(v.length > 90 ? v.slice(0, 90) + "…" : v)}</option>`).join("");
      select.addEventListener("change", () => setState({...state(), [key]: select.value, case: ""}));
      box.appendChild(select);
    }
    const search = document.createElement("input");
    search.id = "search";
    search.placeholder = "search case ids";
    search.addEventListener("input", () => setState({...state(), q: search.value, case: ""}));
    box.appendChild(search);
    $("cases-head").innerHTML = "<tr>" + COLUMNS.map(([key, label]) =>
      `<th data-key="${key}" class="sortable">${esc(label)}</th>`).join("") + "</tr>";
    for (const th of $("cases-head").querySelectorAll("th")) {
      th.addEventListener("click", () => {
        const s = state();
        const dir = s.sort === th.dataset.key && s.dir !== "desc" ? "desc" : "asc";
        setState({...s, sort: th.dataset.key, dir: dir});
      });
    }
  }

  function chosen(s) {
    const q = (s.q || "").toLowerCase();
    let rows = cases.filter((c) => FILTERS.every((k) => !s[k] || c[k] === s[k]) && (!q || c.case.toLowerCase().includes(q)));
    const column = COLUMNS.find(([key]) => key === s.sort);
    if (column) {
      const [key, , numeric] = column;
      const sign = s.dir === "desc" ? -1 : 1;
      rows = rows.slice().sort((a, b) => {
        const x = a[key], y = b[key];
        if (x === null || x === undefined) return 1;  // missing values last, either way
        if (y === null || y === undefined) return -1;
        return sign * (numeric ? x - y : String(x).localeCompare(String(y)));
      });
    }
    return rows;
  }

  function render() {
    const s = state();
    for (const key of FILTERS) $("filter-" + key).value = s[key] || "";
    if ($("search").value !== (s.q || "")) $("search").value = s.q || "";
    const rows = chosen(s);
    $("shown").textContent = `${rows.length} of ${cases.length}`;
    $("cases-body").innerHTML = rows.slice(0, LIMIT).map((c) =>
      `<tr data-case="${esc(c.case + "@" + c.target)}" class="status-${esc(c.status)}"><td><a href="#">${esc(c.case)}</a></td>` +
      `<td>${esc(c.flavor)}</td><td>${esc(c.status)}</td><td>${esc(c.stage || "")}</td><td>${num(c.ratio)}</td>` +
      `<td>${num(c.macs)}</td><td>${num(c.rate)}</td><td>${num(c.compile)}</td><td>${num(c.vmfb)}</td></tr>`).join("");
    $("more").textContent = rows.length > LIMIT ? `the first ${LIMIT} drawn: narrow the filters to see the rest` : "";
    for (const tr of $("cases-body").querySelectorAll("tr")) {
      tr.querySelector("a").addEventListener("click", (ev) => {
        ev.preventDefault();
        setState({...state(), case: tr.dataset.case});
        $("case-view").scrollIntoView({block: "start"});
      });
    }
    // a case is name@target (the name alone: its first target)
    view(cases.find((c) => c.case + "@" + c.target === s.case) || cases.find((c) => c.case === s.case));
  }

  function errorMap(map) {
    // |error| / tolerance over the output positions, one panel per channel group; > 1 fails
    const cell = Math.max(4, Math.floor(160 / Math.max(map.width, map.height)));
    const color = (v) => v <= 100 ? `hsl(${120 - 60 * v / 100}, 60%, 45%)` : `hsl(${Math.max(0, 60 - 60 * (v - 100) / 900)}, 85%, 45%)`;
    return map.panels.map((panel) => {
      let rects = "";
      panel.values.forEach((row, y) => row.forEach((v, x) => {
        rects += `<rect x="${x * cell}" y="${y * cell}" width="${cell}" height="${cell}" fill="${color(v)}"><title>${(v / 100).toFixed(2)}</title></rect>`;
      }));
      return `<figure class="map"><svg width="${map.width * cell}" height="${map.height * cell}">${rects}</svg>` +
        `<figcaption>${esc(panel.label)}</figcaption></figure>`;
    }).join("");
  }

  function view(c) {
    const box = $("case-view");
    if (!c) { box.hidden = true; box.innerHTML = ""; return; }
    const checks = (c.checks || []).map((m) => `<tr><td>${esc(m.name)}</td><td>${m.passed ? "pass" : "fail"}</td>` +
      `<td>${num(m.max_abs_error)}</td><td>${num(m.max_tolerance)}</td><td>${num(m.error_to_tolerance)}</td>` +
      `<td>${num(m.mismatches)} of ${num(m.elements)}</td></tr>`).join("");
    const table = (obj) => Object.keys(obj || {}).map((k) => `<tr><td>${esc(k)}</td><td>${esc(typeof obj[k] === "object" ? JSON.stringify(obj[k]) : obj[k])}</td></tr>`).join("");
    box.hidden = false;
    box.innerHTML = `<h3 id="case-title">${esc(c.case)}</h3><p>on ${esc(c.target)}</p>` +
      `<p>${esc(c.status)}${c.stage ? " at " + esc(c.stage) : ""}${c.issue ? "; issue " + esc(c.issue) : ""}: ${esc(c.reason)}</p>` +
      `<h4>Geometry</h4><table class="kv">${table(c.geometry)}<tr><td>MACs</td><td>${num(c.macs)}</td></tr></table>` +
      `<h4>Checks</h4><table><tr><th>check</th><th></th><th>max abs error</th><th>max tolerance</th><th>error / tolerance</th><th>outside</th></tr>${checks || "<tr><td colspan=6>none ran</td></tr>"}</table>` +
      (c.map ? `<h4>Where the output is wrong</h4><div class="maps">${errorMap(c.map)}</div>` : "") +
      `<h4>Performance</h4><table class="kv">${table(c.perf)}</table>` +
      `<h4>Stage durations (s)</h4><table class="kv">${table(c.stages)}</table>` +
      (c.log_tail ? `<h4>Log (${esc(c.log)})</h4><pre>${esc(c.log_tail)}</pre>` : "") +
      `<h4>Reproduce</h4><pre>bash ${esc(c.repro)}</pre>` +
      `<p><a href="#" id="close-case">back to the table</a></p>`;
    $("close-case").addEventListener("click", (ev) => {
      ev.preventDefault();
      setState({...state(), case: ""});
      $("cases-heading").scrollIntoView({block: "start"});
    });
  }

  controls();
  window.addEventListener("hashchange", () => { render(); land(); });
  render();
  // the script runs before the rest of the page is parsed: land once it is all laid out
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", land);
  else land();
})();
