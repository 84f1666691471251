// rayeval view: runs, units table, unit page, compare, leaderboard.
// Every value shown comes from result rows that the agent under evaluation may have written:
// it is put on the page only as text (textContent / text nodes), never parsed as HTML.
"use strict";

(function () {
  const PAGE_SIZE = 50;
  const COLUMN_LABELS = {
    eval_id: "eval", model: "model", harness: "harness", seed: "seed", verdict: "verdict",
    status: "status", normalized_score: "score", duration_s: "duration (s)", cost_usd: "cost ($)",
    tokens: "tokens", n_turns: "turns", error_type: "error", attempt: "attempt",
  };
  const SORTABLE = { duration_s: "duration", cost_usd: "cost", tokens: "tokens", normalized_score: "score",
    n_turns: "turns", eval_id: "eval", model: "model", seed: "seed" };
  const SORT_COLUMNS = { eval: "eval_id", model: "model", seed: "seed", duration: "duration_s", cost: "cost_usd",
    tokens: "tokens", score: "normalized_score", turns: "n_turns" };
  const FILTERS = ["eval", "model", "seed", "verdict", "error"];
  const FILTER_COLUMNS = { eval: "eval_id", model: "model", seed: "seed", verdict: "verdict", error: "error_type" };

  // -- DOM helpers: text only ------------------------------------------------------------
  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of present(children)) {
      if (child === null || child === undefined) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function fmt(value, column) {
    if (value === null || value === undefined) return "–";
    if (typeof value === "number") {
      if (column === "cost_usd" || column === "Cost ($)") return value.toFixed(4);
      if (Number.isInteger(value)) return String(value);
      return value.toFixed(2);
    }
    return String(value);
  }
  function verdictBadge(verdict) { return h("span", { class: "verdict verdict-" + verdict }, verdict); }
  // A text the server made for the page: its first characters and a note on what is left out
  // (cut at a length, nested too deep, not JSON), said next to it.
  function clipped(field) {
    if (!field) return h("p", { class: "note" }, "(none)");
    return h("div", {}, h("pre", {}, field.text), field.note ? h("p", { class: "truncated" }, field.note) : null);
  }
  function link(route, params, ...label) { return h("a", { href: hashFor(route, params) }, ...label); }
  function hashFor(route, params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") query.set(k, v);
    const text = query.toString();
    return "#/" + route + (text ? "?" + text : "");
  }
  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [route, query] = raw.split("?");
    return { route: route || "", params: Object.fromEntries(new URLSearchParams(query || "")) };
  }

  // -- data sources: the server's JSON API, or the static folder's chunks --------------------
  function apiSource() {
    async function get(path, params) {
      const response = await fetch("api/" + path + "?" + new URLSearchParams(params));
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || response.statusText);
      return body;
    }
    return {
      runs: () => get("runs", {}),
      units: (run, q) => get("units", { run, ...q }),
      unit: (run, id) => get("unit", { run, id }),
      compare: (run, q) => get("compare", { run, ...q }),
      async leaderboard(run) {
        const data = await get("leaderboard", { run });
        return { ...data, src: (name) => "api/plot?" + new URLSearchParams({ run, name }) };
      },
    };
  }

  function staticSource() {
    const waiting = {};
    const loaded = {};
    window.rayevalData = function (key, value) { if (waiting[key]) waiting[key](value); };
    function load(path) {
      if (!loaded[path]) {
        loaded[path] = new Promise((resolve, reject) => {
          waiting[path] = resolve;
          const script = document.createElement("script");
          script.src = "data/" + path + ".js";
          script.onerror = () => reject(new Error("cannot load data/" + path + ".js"));
          document.body.appendChild(script);
        });
      }
      return loaded[path];
    }
    async function run(id) {
      const all = await load("runs");
      const found = all.runs.find((r) => r.run_id === id);
      if (!found) throw new Error("no run " + JSON.stringify(id));
      if (!found.rows) {
        const chunks = await Promise.all(Array.from({ length: found.chunks }, (_, i) => load(found.dir + "/index-" + i)));
        found.rows = chunks.flatMap((c) => c.rows);
        found.col = Object.fromEntries(chunks.length ? chunks[0].columns.map((c, i) => [c, i]) : []);
      }
      return found;
    }
    function compareValues(a, b) {
      if (a === b) return 0;
      if (a === null) return 1;
      if (b === null) return -1;
      return a < b ? -1 : 1;
    }
    async function detail(r, row) {
      const chunk = await load(r.dir + "/units-" + row[r.col.detail_chunk]);
      return chunk[row[r.col.unit_id]];
    }
    return {
      runs: () => load("runs"),
      async units(id, q) {
        const r = await run(id);
        const col = r.col;
        const size = Math.min(Number(q.size) || PAGE_SIZE, 500);
        let rows = r.rows.filter((row) => FILTERS.every((f) =>
          q[f] === undefined || q[f] === "" || String(row[col[FILTER_COLUMNS[f]]]) === q[f]));
        const sort = q.sort || "eval";
        const desc = q.order === "desc";
        const ties = (a, b) => compareValues(a[col.eval_id], b[col.eval_id]) ||
          compareValues(a[col.model], b[col.model]) || compareValues(a[col.seed], b[col.seed]);
        rows = rows.slice().sort((a, b) => {
          if (sort === "eval") return desc ? -ties(a, b) : ties(a, b);
          const x = a[col[SORT_COLUMNS[sort]]], y = b[col[SORT_COLUMNS[sort]]];
          if (x === null || y === null) return compareValues(x, y) || ties(a, b);
          return (desc ? -compareValues(x, y) : compareValues(x, y)) || ties(a, b);
        });
        const counts = { passed: 0, failed: 0, error: 0 };
        for (const row of rows) counts[row[col.verdict]] += 1;
        const page = Math.max(1, Number(q.page) || 1);
        const columns = Object.keys(COLUMN_LABELS).filter((c) => c in col);
        return {
          run_id: id, total: r.rows.length, matched: rows.length, counts, page, size,
          pages: Math.max(1, Math.ceil(rows.length / size)), facets: r.facets,
          columns: ["unit_id", ...columns],
          rows: rows.slice((page - 1) * size, page * size).map((row) => ["unit_id", ...columns].map((c) => row[col[c]])),
        };
      },
      async unit(id, unitId) {
        const r = await run(id);
        const row = r.rows.find((x) => x[r.col.unit_id] === unitId);
        if (!row) throw new Error("run " + JSON.stringify(id) + " has no unit " + JSON.stringify(unitId));
        return detail(r, row);
      },
      async compare(id, q) {
        const r = await run(id);
        const pick = async (model) => {
          const row = r.rows.find((x) => x[r.col.eval_id] === q.eval && String(x[r.col.seed]) === String(q.seed) &&
            x[r.col.model] === model);
          return row ? detail(r, row) : null;
        };
        return { run_id: id, eval: q.eval, seed: Number(q.seed), models: [q.a, q.b], a: await pick(q.a), b: await pick(q.b) };
      },
      async leaderboard(id) {
        const r = await run(id);
        const data = await load(r.dir + "/leaderboard");
        return { ...data, src: (name) => "data/" + r.dir + "/plot-" + name + ".svg" };
      },
    };
  }

  const source = document.body.dataset.source === "static" ? staticSource() : apiSource();
  const main = document.getElementById("main");
  let knownRuns = null;

  async function runsList() {
    if (!knownRuns) knownRuns = await source.runs();
    return knownRuns;
  }
  async function defaultRun(params) {
    if (params.run) return params.run;
    const all = await runsList();
    if (!all.runs.length) throw new Error("no runs under this results root");
    return all.runs[0].run_id;
  }
  function setNav(run) {
    const nav = document.getElementById("nav");
    nav.replaceChildren(...present([
      link("", {}, "Runs"),
      run ? link("units", { run }, "Units") : null,
      run ? link("compare", { run }, "Compare") : null,
      run ? link("leaderboard", { run }, "Leaderboard") : null,
    ]));
  }
  function present(nodes) { return nodes.flat(Infinity).filter((n) => n !== null && n !== undefined); }
  function show(...nodes) { main.replaceChildren(...present(nodes)); }

  // -- pages ------------------------------------------------------------------------------
  async function runsPage() {
    const all = await runsList();
    document.getElementById("root").textContent = all.root || "";
    setNav(all.runs.length ? all.runs[0].run_id : null);
    const head = ["run", "status", "created", "agent", "models", "units", "passed", "failed", "error", ""];
    const rows = all.runs.map((r) => h("tr", {},
      h("td", {}, link("units", { run: r.run_id }, r.run_id)), h("td", {}, fmt(r.status)), h("td", {}, fmt(r.created_at)),
      h("td", {}, fmt(r.agent)), h("td", {}, (r.models || []).join(", ")), h("td", { class: "num" }, fmt(r.units)),
      h("td", { class: "num" }, fmt(r.passed)), h("td", { class: "num" }, fmt(r.failed)), h("td", { class: "num" }, fmt(r.error)),
      h("td", {}, link("leaderboard", { run: r.run_id }, "leaderboard"))));
    show(h("h1", {}, "Runs"), h("table", { id: "runs" }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows)));
  }

  function select(name, label, options, current, onchange) {
    return h("label", {}, label, h("select", { name, onchange },
      h("option", { value: "" }, "(all)"),
      options.map((o) => h("option", { value: String(o), selected: String(o) === current ? "selected" : null }, String(o)))));
  }

  async function unitsPage(params) {
    const run = await defaultRun(params);
    setNav(run);
    const q = {};
    for (const key of [...FILTERS, "sort", "order", "page"]) if (params[key]) q[key] = params[key];
    const data = await source.units(run, q);
    const go = (change) => { location.hash = hashFor("units", { run, ...q, page: null, ...change }); };
    const filterBar = h("div", { class: "filters" },
      select("eval", "eval", data.facets.eval, q.eval, (e) => go({ eval: e.target.value })),
      select("model", "model", data.facets.model, q.model, (e) => go({ model: e.target.value })),
      select("seed", "seed", data.facets.seed, q.seed, (e) => go({ seed: e.target.value })),
      select("verdict", "verdict", ["passed", "failed", "error"], q.verdict, (e) => go({ verdict: e.target.value })),
      select("error", "error kind", data.facets.error, q.error, (e) => go({ error: e.target.value })),
      h("label", {}, "sort", h("select", { name: "sort", onchange: (e) => go({ sort: e.target.value }) },
        Object.keys(SORT_COLUMNS).map((k) => h("option", { value: k, selected: (q.sort || "eval") === k ? "selected" : null }, k)))),
      h("label", {}, "order", h("select", { name: "order", onchange: (e) => go({ order: e.target.value }) },
        ["asc", "desc"].map((k) => h("option", { value: k, selected: (q.order || "asc") === k ? "selected" : null }, k)))));
    const counts = h("p", { id: "counts", class: "meta" },
      `${data.matched.toLocaleString()} of ${data.total.toLocaleString()} units · passed ${data.counts.passed} · ` +
      `failed ${data.counts.failed} · error ${data.counts.error}`);
    const shown = data.columns.filter((c) => c !== "unit_id");
    const head = h("tr", {}, shown.map((c) => SORTABLE[c]
      ? h("th", { class: "sortable", onclick: () => go({ sort: SORTABLE[c], order: q.sort === SORTABLE[c] && q.order !== "desc" ? "desc" : "asc" }) }, COLUMN_LABELS[c])
      : h("th", {}, COLUMN_LABELS[c] || c)));
    const body = data.rows.map((row) => {
      const record = Object.fromEntries(data.columns.map((c, i) => [c, row[i]]));
      return h("tr", { "data-unit": record.unit_id }, shown.map((c) => {
        if (c === "eval_id") return h("td", {}, link("unit", { run, id: record.unit_id }, record.eval_id));
        if (c === "verdict") return h("td", {}, verdictBadge(record.verdict));
        return h("td", { class: typeof record[c] === "number" ? "num" : null }, fmt(record[c], c));
      }));
    });
    const pager = h("div", { class: "pager" },
      h("button", { disabled: data.page <= 1 ? "disabled" : null, onclick: () => go({ page: data.page - 1 }) }, "‹ previous"),
      h("span", { id: "page" }, `page ${data.page} of ${data.pages}`),
      h("button", { disabled: data.page >= data.pages ? "disabled" : null, onclick: () => go({ page: data.page + 1 }) }, "next ›"));
    show(h("h1", {}, "Units of ", run), filterBar, counts, h("table", { id: "units" }, h("thead", {}, head), h("tbody", {}, body)), pager);
  }

  function factsTable(u) {
    const facts = [["run", u.run_id], ["unit", u.unit_id], ["model", u.model], ["harness", u.harness], ["seed", u.seed],
      ["status", u.status], ["score", u.normalized_score], ["duration (s)", u.duration_s], ["agent (s)", u.agent_s],
      ["grading (s)", u.grade_s], ["cost ($)", u.cost_usd], ["input tokens", u.input_tokens], ["output tokens", u.output_tokens],
      ["turns", u.n_turns], ["refusal", u.refusal], ["attempt", u.attempt], ["grader", u.grader_type], ["isolation", u.isolation], ["node", u.node],
      ["started", u.started_at], ["finished", u.finished_at]];
    return h("table", { class: "facts" }, h("tbody", {}, facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, fmt(v, k === "cost ($)" ? "cost_usd" : k))))));
  }

  function trajectoryView(t) {
    if (!t) return h("p", { class: "note" }, "(no trajectory stored)");
    const steps = t.steps.map((s) => h("div", { class: `step role-${s.role.replace(/[^a-z_-]/gi, "")} kind-${s.kind}` },
      h("div", { class: "who" }, [s.role, s.kind.replace("_", " "), s.title].filter(Boolean).join(" · ")),
      clipped(s)));
    const note = t.total > t.steps.length ? h("p", { class: "truncated" }, `showing the first ${t.steps.length} of ${t.total} steps`) : null;
    return h("div", { id: "trajectory" }, h("p", { class: "meta" }, `${t.total} steps (${t.format})`), steps, note);
  }

  function unitView(u) {
    const metrics = u.metrics.length
      ? h("table", { id: "metrics" }, h("tbody", {}, u.metrics.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v))))))
      : h("p", { class: "note" }, "(no metrics)");
    const error = u.error_type || u.error_message
      ? h("div", { class: "error-box", id: "error" }, h("strong", {}, fmt(u.error_type)), clipped(u.error_message),
        u.error_traceback ? h("details", { id: "traceback" }, h("summary", {}, "traceback"), clipped(u.error_traceback)) : null)
      : h("p", { class: "note" }, "(no error)");
    const artifacts = u.artifacts.length
      ? u.artifacts.map((a) => h("details", {}, h("summary", {}, `${a.name} (${a.length.toLocaleString()} characters)`), clipped(a)))
      : h("p", { class: "note" }, "(no artifacts)");
    const leftOut = u.artifacts_left_out
      ? h("p", { class: "truncated" }, `${u.artifacts_left_out.toLocaleString()} more artifacts not shown`) : null;
    return h("div", { class: "unit" },
      u.failure ? h("div", { class: "error-box", id: "unit-failure" }, u.failure) : null,
      h("h2", {}, "Task"), u.task_prompt && u.task_prompt.text ? clipped(u.task_prompt.text) : null,
      h("p", { class: "note" }, u.task_prompt ? u.task_prompt.note : ""),
      h("h2", {}, "Answer"), h("div", { id: "answer" }, clipped(u.answer)), h("p", { class: "note" }, "answer source: " + fmt(u.answer_source)),
      h("h2", {}, "Verdict"), h("p", { id: "verdict" }, verdictBadge(u.verdict), " score ", fmt(u.normalized_score), " · grader ", fmt(u.grader_type)),
      h("h3", {}, "Reasoning"), h("div", { id: "reasoning" }, clipped(u.reasoning)),
      h("h3", {}, "Metrics"), metrics,
      u.refusal_verdict ? h("div", { class: "error-box", id: "refusal" }, h("strong", {}, "The model refused"), clipped(u.refusal_verdict)) : null,
      h("h2", {}, "Error"), error,
      h("h2", {}, "Trajectory"), trajectoryView(u.trajectory),
      h("h2", {}, "Artifacts"), artifacts, leftOut,
      h("h2", {}, "Facts"), factsTable(u),
      h("h2", {}, "Metadata"), clipped(u.metadata));
  }

  async function unitPage(params) {
    const run = await defaultRun(params);
    setNav(run);
    const u = await source.unit(run, params.id || "");
    const compare = link("compare", { run, eval: u.eval_id, seed: u.seed, a: u.model }, "compare with another model");
    show(h("h1", {}, u.eval_id, " · ", u.model, " · seed ", fmt(u.seed), " ", verdictBadge(u.verdict)),
      h("p", {}, link("units", { run, eval: u.eval_id }, "all units of this eval"), " · ", compare), unitView(u));
  }

  async function comparePage(params) {
    const run = await defaultRun(params);
    setNav(run);
    const facets = (await source.units(run, { size: 1 })).facets;
    const q = { eval: params.eval || facets.eval[0], seed: params.seed || String(facets.seed[0]),
      a: params.a || facets.model[0], b: params.b || facets.model.find((m) => m !== (params.a || facets.model[0])) || facets.model[0] };
    const go = (change) => { location.hash = hashFor("compare", { run, ...q, ...change }); };
    const bar = h("div", { class: "filters" },
      ["eval", "seed"].map((k) => select(k, k, facets[k], q[k], (e) => go({ [k]: e.target.value }))),
      select("a", "model A", facets.model, q.a, (e) => go({ a: e.target.value })),
      select("b", "model B", facets.model, q.b, (e) => go({ b: e.target.value })));
    const data = await source.compare(run, q);
    const side = (u, model) => h("div", { class: "side" }, h("h2", {}, model, " ", u ? verdictBadge(u.verdict) : ""),
      u ? [h("p", {}, link("unit", { run, id: u.unit_id }, "open unit")), unitView(u)] : h("p", { class: "note" }, "no unit of this model on this eval and seed"));
    show(h("h1", {}, "Compare on ", q.eval, " · seed ", q.seed), bar,
      h("div", { class: "side-by-side", id: "compare" }, side(data.a, q.a), side(data.b, q.b)));
  }

  async function leaderboardPage(params) {
    const run = await defaultRun(params);
    setNav(run);
    const data = await source.leaderboard(run);
    const plotTitles = { accuracy: "Accuracy with 95% CI", cost: "Cost vs accuracy", task: "Accuracy by task category", kit: "Accuracy by platform" };
    const tables = data.tables.map((t) => h("section", {}, h("h2", {}, t.title),
      h("table", { class: "leaderboard" }, h("thead", {}, h("tr", {}, t.columns.map((c) => h("th", {}, c)))),
        h("tbody", {}, t.rows.map((row) => h("tr", {}, row.map((v, i) => h("td", { class: typeof v === "number" ? "num" : null }, fmt(v, t.columns[i])))))))));
    const plots = data.plots.map((name) => h("figure", {}, h("img", { class: "plot", alt: plotTitles[name] || name, src: data.src(name) })));
    show(h("h1", {}, "Leaderboard of ", run),
      h("p", { class: "note", id: "method" }, data.method),
      tables, h("h2", {}, "Plots"), data.note ? h("p", { class: "note" }, data.note) : null, plots);
  }

  const PAGES = { "": runsPage, units: unitsPage, unit: unitPage, compare: comparePage, leaderboard: leaderboardPage };

  async function render() {
    const { route, params } = parseHash();
    const page = PAGES[route];
    try {
      if (!page) throw new Error("no page " + JSON.stringify(route));
      await page(params);
    } catch (error) {
      show(h("div", { class: "error-box", id: "failure" }, "Cannot show this page: ", error.message));
    }
  }
  window.addEventListener("hashchange", render);
  render();
})();
