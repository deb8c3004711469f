// Workflows (issue 27): the list, one workflow with its graph and runs, and one run's page that
// draws the graph with each node coloured by its state; a node's tasks and logs are one click
// away (the Runs page of a task shows its output).
//
// The graph is plain SVG built with DOM calls: every name from the server goes in as a text
// node, never as markup. Nodes are laid out in layers (a node one layer right of its deepest
// parent); a node's condition is written above it and drawn (colour, dashes) on the edges into it.

import { segment } from "../api.js";
import { mapLimit } from "../data.js";
import {
  actionButton,
  badge,
  confirmDialog,
  duration,
  fieldList,
  fill,
  h,
  link,
  note,
  section,
  table,
  timeEl,
  toDate,
  toast,
} from "../dom.js";

const SVG = "http://www.w3.org/2000/svg";
const PAGE = 100;
const MAX_PAGES = 10;
const RUNS_SHOWN = 20;
const NODE_W = 180;
const NODE_H = 50;
const GAP_X = 90;
const GAP_Y = 34;
const PAD = 20;
const LABEL_CHARS = 22;
export const RUN_ENDED = new Set(["succeeded", "failed", "cancelled", "timed_out"]);
const STATE_KIND = {
  pending: "muted",
  running: "info",
  succeeded: "ok",
  failed: "bad",
  skipped: "warn",
  cancelled: "warn",
  timed_out: "bad",
};
const CONDITIONS = new Set(["on_success", "on_failure", "on_done"]);

// Whether the caller's role on `app` allows `role` ("operator", "editor"): only to draw the
// controls; the API checks every request. A console without per-app rights asks canWrite.
function may(ctx, role, app) {
  return typeof ctx.may === "function" ? ctx.may(role, app) : ctx.canWrite;
}

export function stateBadge(state) {
  return badge(String(state || "?"), STATE_KIND[state] || "muted");
}

const base = (name) => `/api/workflow/${segment(name)}`;
const runPath = (name, runId) => `${base(name)}/runs/${segment(runId)}`;

function pageOf(answer) {
  if (Array.isArray(answer)) return { items: answer, nextCursor: null };
  return { items: (answer && answer.items) || [], nextCursor: (answer && answer.nextCursor) || null };
}

// Every workflow the caller may see (up to MAX_PAGES pages): {items, more}.
export async function allWorkflows(api) {
  const items = [];
  let cursor = null;
  for (let n = 0; n < MAX_PAGES; n += 1) {
    const page = pageOf(await api.get("/api/workflows", cursor ? { limit: PAGE, cursor } : { limit: PAGE }));
    items.push(...page.items.filter((w) => w && typeof w === "object"));
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  return { items, more: Boolean(cursor) };
}

// The names of the workflows with a node that runs `job`, or null when the server has no
// workflows (an older server).
export async function workflowsOfJob(api, job) {
  if (!(await api.has("GET", "/api/workflows"))) return null;
  const { items } = await allWorkflows(api);
  return items
    .filter((w) => Array.isArray(w.nodes) && w.nodes.some((n) => n && n.job === job))
    .map((w) => w.workflowName);
}

// A section for the job page: which workflows run this job.
export function jobWorkflowsSection(ctx, job) {
  const box = h("div", { "data-list": "job-workflows" });
  ctx.every(15000, async () => {
    const names = await workflowsOfJob(ctx.api, job);
    if (!ctx.alive) return;
    if (names === null) fill(box, note("This server has no workflows."));
    else if (!names.length) fill(box, note("No workflow runs this job."));
    else fill(box, h("ul", {}, names.map((n) => h("li", {}, link(["workflows", n], n)))));
  });
  return section("Workflows", box);
}

// --- the graph -------------------------------------------------------------------------------

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function shorten(text) {
  const value = String(text ?? "");
  return value.length > LABEL_CHARS ? `${value.slice(0, LABEL_CHARS - 1)}…` : value;
}

// Positions of `nodes` ([{name, dependsOn}]): layer = 1 + the deepest parent's layer; within a
// layer, nodes are ordered by their parents' mean row (fewer crossings), then by name.
export function layout(nodes) {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (name) => {
    if (depth.has(name)) return depth.get(name);
    if (visiting.has(name) || !byName.has(name)) return -1; // a cycle or an unknown parent
    visiting.add(name);
    const parents = byName.get(name).dependsOn || [];
    const d = parents.reduce((max, p) => Math.max(max, depthOf(p) + 1), 0);
    visiting.delete(name);
    depth.set(name, d);
    return d;
  };
  for (const n of nodes) depthOf(n.name);
  const layers = [];
  for (const n of nodes) {
    const d = depth.get(n.name);
    (layers[d] = layers[d] || []).push(n.name);
  }
  const row = new Map();
  const place = new Map();
  layers.forEach((names, d) => {
    const weight = (name) => {
      const rows = (byName.get(name).dependsOn || []).filter((p) => row.has(p)).map((p) => row.get(p));
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : 0;
    };
    names.sort((a, b) => weight(a) - weight(b) || (a < b ? -1 : a > b ? 1 : 0));
    names.forEach((name, i) => {
      row.set(name, i);
      place.set(name, { x: PAD + d * (NODE_W + GAP_X), y: PAD + i * (NODE_H + GAP_Y) });
    });
  });
  const tallest = Math.max(1, ...layers.map((names) => (names || []).length));
  return {
    place,
    width: PAD * 2 + Math.max(1, layers.length) * (NODE_W + GAP_X) - GAP_X,
    height: PAD * 2 + tallest * (NODE_H + GAP_Y) - GAP_Y,
  };
}

// The graph of `nodes` ([{name, job, dependsOn, condition, state?}]); `onSelect(name)` is called
// when a node is clicked (or chosen with the keyboard), `selected` is outlined.
export function graph(nodes, { onSelect, selected } = {}) {
  const { place, width, height } = layout(nodes);
  const root = svg("svg", {
    class: "wf-graph",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `Workflow graph of ${nodes.length} node${nodes.length === 1 ? "" : "s"}`,
    "data-graph": "workflow",
  });
  root.append(
    svg(
      "defs",
      {},
      svg(
        "marker",
        { id: "wf-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "wf-arrow" }),
      ),
    ),
  );
  const edges = svg("g", { class: "wf-edges" });
  const boxes = svg("g", { class: "wf-nodes" });
  root.append(edges, boxes);
  for (const node of nodes) {
    const to = place.get(node.name);
    const condition = CONDITIONS.has(node.condition) ? node.condition : "on_success";
    for (const parent of node.dependsOn || []) {
      const from = place.get(parent);
      if (!from || !to) continue;
      const x1 = from.x + NODE_W;
      const y1 = from.y + NODE_H / 2;
      const x2 = to.x;
      const y2 = to.y + NODE_H / 2;
      const bend = Math.max(30, (x2 - x1) / 2);
      edges.append(
        svg(
          "g",
          { class: `wf-edge ${condition}`, "data-edge": `${parent}->${node.name}`, "data-condition": condition },
          svg("title", {}, `${parent} → ${node.name}: ${condition}`),
          svg("path", {
            d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
            "marker-end": "url(#wf-arrow)",
          }),
        ),
      );
    }
    // The condition belongs to the node its edges lead to: one label above that node (where no
    // edge passes), in the edges' colour, rather than one per edge where edges bunch up.
    if (to && (node.dependsOn || []).length) {
      edges.append(
        svg("text", { class: `wf-cond ${condition}`, x: to.x + 2, y: to.y - 5, "data-condition-of": node.name }, condition),
      );
    }
  }
  for (const node of nodes) {
    const at = place.get(node.name);
    if (!at) continue;
    const state = node.state || "definition";
    const choose = () => onSelect && onSelect(node.name);
    const group = svg(
      "g",
      {
        class: `wf-node ${state}${node.name === selected ? " selected" : ""}`,
        transform: `translate(${at.x} ${at.y})`,
        "data-node": node.name,
        "data-state": state,
        tabindex: onSelect ? 0 : null,
        role: onSelect ? "button" : null,
        "aria-label": `${node.name}${node.state ? `: ${node.state}` : ""}`,
        onclick: choose,
        onkeydown: (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            choose();
          }
        },
      },
      svg("title", {}, `${node.name} (job ${node.job || "?"})${node.state ? `: ${node.state}` : ""}`),
      svg("rect", { width: NODE_W, height: NODE_H, rx: 8, ry: 8 }),
      svg("text", { x: 10, y: 20, class: "wf-name" }, shorten(node.name)),
      svg("text", { x: 10, y: 38, class: "wf-sub" }, node.state ? `${node.state} · ${shorten(node.job)}` : shorten(node.job)),
    );
    boxes.append(group);
  }
  const legend = h(
    "p",
    { class: "wf-legend muted" },
    "Edges: ",
    h("span", { class: "wf-key on_success" }, "on_success"),
    " every parent succeeded · ",
    h("span", { class: "wf-key on_failure" }, "on_failure"),
    " some parent failed · ",
    h("span", { class: "wf-key on_done" }, "on_done"),
    " every parent ended",
  );
  return h("div", { class: "wf-graph-wrap" }, root, legend);
}

// A run's nodes with their edges: from the run's snapshot of the definition (`definition` in
// its answer; a run never changes with the workflow), else from the workflow's definition.
export function runNodes(run, definition) {
  const snapshot = (run && run.definition && run.definition.nodes) || (definition && definition.nodes) || [];
  const defined = new Map(snapshot.map((n) => [n.name, n]));
  return ((run && run.nodes) || []).map((n) => {
    const d = defined.get(n.name) || {};
    return {
      ...n,
      job: n.job ?? d.job,
      dependsOn: n.dependsOn ?? d.dependsOn ?? [],
      condition: n.condition ?? d.condition ?? "on_success",
    };
  });
}

// A fire time as epoch seconds or ISO 8601 (the server's choice), shown as a time.
function fireTime(value) {
  return toDate(value) ? timeEl(value, { withRelative: false, ms: true }) : h("code", {}, String(value ?? "—"));
}

function span(start, end) {
  const a = toDate(start);
  const b = toDate(end);
  return a && b ? duration(b - a) : "—";
}

// --- views -----------------------------------------------------------------------------------

export function list(ctx) {
  const { api } = ctx;
  const body = h("div");
  const count = h("span", { class: "muted" });
  const el = h("div", { class: "view" }, h("div", { class: "heading" }, h("h1", {}, "Workflows ", count)), body);
  const poll = ctx.every(10000, async () => {
    const { items, more } = await allWorkflows(api);
    // Each workflow's newest run, four requests at a time (a failed read shows "?").
    const last = await mapLimit(items, 4, async (w) => pageOf(await api.get(`${base(w.workflowName)}/runs`, { limit: 1 })).items[0] || null);
    if (!ctx.alive) return;
    const lastOf = new Map(items.map((w, i) => [w.workflowName, last[i]]));
    count.textContent = `(${items.length}${more ? "+" : ""})`;
    fill(
      body,
      table(
        [
          { label: "Workflow", cell: (w) => link(["workflows", w.workflowName], w.workflowName) },
          { label: "App", cell: (w) => (w.appName ? link(["apps", w.appName], w.appName) : "—") },
          { label: "Cron", cell: (w) => (w.cron ? h("code", {}, w.cron) : h("span", { class: "muted" }, "only when triggered")) },
          { label: "Nodes", cell: (w) => String((w.nodes || []).length) },
          { label: "State", cell: (w) => (w.enabled === false ? badge("disabled", "warn") : badge("enabled", "ok")) },
          { label: "Last run", cell: (w) => lastRunCell(w.workflowName, lastOf.get(w.workflowName)) },
          { label: "", cell: (w) => (may(ctx, "operator", w.appName) ? actions(ctx, w, () => poll.now()) : "") },
        ].filter(Boolean),
        items,
        "No workflow registered yet (ejcloud workflow add -f FILE, or POST /api/workflow).",
        { "data-table": "workflows" },
      ),
    );
  });
  return el;
}

function lastRunCell(name, run) {
  if (run instanceof Error) return h("span", { class: "muted", title: run.message }, "?");
  if (!run) return h("span", { class: "muted" }, "never");
  return [link(["workflows", name, "runs", run.runId], stateBadge(run.state)), " ", timeEl(run.startedAt)];
}

function actions(ctx, workflow, refresh) {
  const name = workflow.workflowName;
  const enabled = workflow.enabled !== false;
  return h(
    "span",
    { class: "actions inline" },
    actionButton(
      "Trigger",
      async () => {
        const answer = await ctx.api.post(`${base(name)}/trigger`);
        const runId = answer && answer.runId;
        toast(`Workflow ${name} triggered${runId ? `: run ${runId}` : ""}`);
        if (runId) location.hash = `#/workflows/${segment(name)}/runs/${segment(runId)}`;
        else await refresh();
      },
      { class: "small", "data-action": "trigger" },
    ),
    actionButton(
      enabled ? "Disable" : "Enable",
      async () => {
        await ctx.api.post(`${base(name)}/${enabled ? "disable" : "enable"}`);
        toast(`Workflow ${name} ${enabled ? "disabled" : "enabled"}`);
        await refresh();
      },
      { class: "small secondary", "data-action": "toggle" },
    ),
  );
}

const FIELDS = [
  ["appName", "App"],
  ["cron", "Cron"],
  ["timeZone", "Time zone"],
  ["misfire", "Misfire"],
  ["overlapPolicy", "Overlap policy"],
  ["timeoutSeconds", "Run timeout (s)"],
  ["failFast", "Fail fast"],
  ["description", "Description"],
];

function fieldValue(key, value) {
  if (value === undefined || value === null || value === "") {
    return h("span", { class: "muted" }, key === "cron" ? "none: runs only when triggered" : "—");
  }
  if (key === "appName") return link(["apps", value], value);
  if (key === "cron") return h("code", {}, String(value));
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

export function detail(ctx) {
  const { api } = ctx;
  const name = ctx.params.workflow;
  const state = h("span");
  const actionBox = h("div", { class: "actions" });
  const fields = h("div");
  const graphBox = h("div");
  const runsBox = h("div");
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["workflows"], "Workflows"), " / "),
    h("div", { class: "heading" }, h("h1", {}, name, " ", state), actionBox),
    section("Graph", graphBox),
    section("Recent runs", runsBox),
    section("Definition", fields),
  );
  const poll = ctx.every(5000, async () => {
    let workflow;
    try {
      workflow = await api.get(base(name));
    } catch (error) {
      if (error.status === 404) {
        fill(fields, h("p", { class: "error" }, error.message));
        for (const box of [actionBox, graphBox, runsBox]) fill(box);
        return;
      }
      throw error;
    }
    const runs = pageOf(await api.get(`${base(name)}/runs`, { limit: RUNS_SHOWN })).items;
    if (!ctx.alive) return;
    fill(state, workflow.enabled === false ? badge("disabled", "warn") : badge("enabled", "ok"));
    fill(fields, fieldList(FIELDS.map(([key, label]) => [label, fieldValue(key, workflow[key])])));
    fill(
      graphBox,
      graph(workflow.nodes || [], { onSelect: (node) => (location.hash = `#/jobs/${segment(jobOf(workflow, node))}`) }),
      note("Click a node for its job. A node's condition is written above it and drawn on the edges that lead to it."),
    );
    fill(
      runsBox,
      table(
        [
          { label: "Run", cell: (r) => link(["workflows", name, "runs", r.runId], r.runId, null, { "data-run": r.runId }) },
          { label: "Fire time", cell: (r) => fireTime(r.fireTime) },
          { label: "State", cell: (r) => stateBadge(r.state) },
          { label: "Started", cell: (r) => timeEl(r.startedAt) },
          { label: "Duration", cell: (r) => span(r.startedAt, r.endedAt) },
        ],
        runs,
        "No run yet.",
        { "data-table": "workflow-runs" },
      ),
    );
    if (may(ctx, "operator", workflow.appName)) {
      fill(
        actionBox,
        actions(ctx, workflow, () => poll.now()),
        !may(ctx, "editor", workflow.appName) ? null : actionButton(
          "Delete",
          async () => {
            const ok = await confirmDialog({
              title: `Delete workflow ${name}?`,
              lines: ["Its runs in flight are cancelled. Its jobs stay, and so does the history."],
              confirmText: "Delete workflow",
              danger: true,
            });
            if (!ok) return;
            await api.del(base(name));
            toast(`Workflow ${name} deleted`);
            location.hash = "#/workflows";
          },
          { class: "danger small", "data-action": "delete" },
        ),
      );
    }
  });
  return el;
}

function jobOf(workflow, node) {
  const found = (workflow.nodes || []).find((n) => n.name === node);
  return found ? found.job : node;
}

export function run(ctx) {
  const { api } = ctx;
  const name = ctx.params.workflow;
  const runId = ctx.params.run;
  const state = h("span");
  const actionBox = h("div", { class: "actions" });
  const summary = h("div");
  const graphBox = h("div");
  const nodeBox = h("div", { "data-panel": "node" });
  const nodesTable = h("div");
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["workflows"], "Workflows"), " / ", link(["workflows", name], name), " / "),
    h("div", { class: "heading" }, h("h1", {}, "Run ", h("code", { class: "wrap" }, runId), " ", state), actionBox),
    section("Summary", summary),
    section("Graph", graphBox, nodeBox),
    section("Nodes", nodesTable),
  );
  let selected = ctx.query.get("node") || "";
  let latest = null;
  const select = (node) => {
    selected = node;
    ctx.setQuery({ node });
    render();
  };

  function render() {
    if (!latest) return;
    const { run, nodes } = latest;
    fill(state, stateBadge(run.state));
    fill(
      summary,
      fieldList([
        ["Workflow", link(["workflows", name], name)],
        ["State", stateBadge(run.state)],
        ["Fire time", fireTime(run.fireTime)],
        ["Started", timeEl(run.startedAt)],
        ["Ended", timeEl(run.endedAt)],
        ["Duration", span(run.startedAt, run.endedAt)],
      ]),
    );
    fill(graphBox, graph(nodes, { onSelect: select, selected }));
    const node = nodes.find((n) => n.name === selected);
    fill(nodeBox, node ? nodePanel(node) : note("Click a node for its tasks and their logs."));
    fill(
      nodesTable,
      table(
        [
          { label: "Node", cell: (n) => h("a", { href: "#", "data-select": n.name, onclick: (e) => { e.preventDefault(); select(n.name); } }, n.name) },
          { label: "Job", cell: (n) => (n.job ? link(["jobs", n.job], n.job) : "—") },
          { label: "State", cell: (n) => stateBadge(n.state) },
          { label: "Started", cell: (n) => timeEl(n.startedAt) },
          { label: "Duration", cell: (n) => span(n.startedAt, n.endedAt) },
          { label: "Tasks", cell: (n) => String(new Set(n.taskIds || []).size) },
          { label: "Reason", cell: (n) => h("span", { class: "reason" }, n.reason || "") },
        ],
        nodes,
        "This run has no nodes.",
        { "data-table": "run-nodes" },
      ),
    );
    if (may(ctx, "operator", latest.app)) {
      fill(
        actionBox,
        run.state === "running"
          ? actionButton("Cancel run", async () => {
              const ok = await confirmDialog({
                title: `Cancel run ${runId}?`,
                lines: ["Its running nodes are killed; the nodes not started never start."],
                confirmText: "Cancel run",
                danger: true,
              });
              if (!ok) return;
              await api.post(`${runPath(name, runId)}/cancel`);
              toast(`Run ${runId} cancelled`);
              await poll.now();
            }, { class: "danger", "data-action": "cancel" })
          : null,
        RUN_ENDED.has(run.state) && run.state !== "succeeded"
          ? actionButton("Retry failed nodes", async () => {
              await api.post(`${runPath(name, runId)}/retry`);
              toast(`Run ${runId}: its failed and skipped nodes run again`);
              await poll.now();
            }, { "data-action": "retry" })
          : null,
      );
    }
  }

  function nodePanel(node) {
    const job = node.job || "";
    const tasks = [...new Set(node.taskIds || [])];
    const canMark = may(ctx, "operator", latest.app) && ["failed", "skipped", "cancelled"].includes(node.state);
    return h(
      "div",
      { class: "wf-node-panel", "data-node-panel": node.name },
      h("h3", {}, "Node ", node.name, " ", stateBadge(node.state)),
      fieldList([
        ["Job", job ? link(["jobs", job], job) : "—"],
        ["Condition", node.condition || "on_success"],
        ["Depends on", (node.dependsOn || []).join(", ") || "—"],
        ["Started", timeEl(node.startedAt)],
        ["Duration", span(node.startedAt, node.endedAt)],
        ["Reason", node.reason || "—"],
      ]),
      tasks.length
        ? h(
            "ul",
            { class: "wf-tasks", "data-list": "node-tasks" },
            tasks.map((t) => h("li", {}, link(["runs", job, t], t, null, { class: "task-id", "data-task": t }), " ", h("span", { class: "muted" }, "(status and logs)"))),
          )
        : note("No task launched for this node."),
      job ? h("p", {}, link(["runs"], `All runs of job ${job}`, { job })) : null,
      canMark
        ? actionButton("Mark succeeded", async () => {
            const ok = await confirmDialog({
              title: `Mark node ${node.name} succeeded?`,
              lines: ["Its children go on as if it had succeeded; it is not run again."],
              confirmText: "Mark succeeded",
            });
            if (!ok) return;
            await api.post(`${runPath(name, runId)}/nodes/${segment(node.name)}/mark-success`);
            toast(`Node ${node.name} marked succeeded`);
            await poll.now();
          }, { "data-action": "mark-success" })
        : null,
    );
  }

  let definition = null;
  let shown = "";
  const poll = ctx.every(2000, async () => {
    const found = await api.get(runPath(name, runId));
    // The definition gives the app (whose roles decide the controls) and fills in what a run
    // answer may lack (its edges); it is read once.
    const snapshotted = Boolean(found && found.definition && found.definition.appName);
    if (!definition && !snapshotted) {
      try {
        definition = await api.get(base(name));
      } catch {
        definition = { nodes: [] };
      }
    }
    if (!ctx.alive) return;
    // An ended run changes no more: the graph is drawn again only when the answer differs
    // (redrawing would also take the keyboard focus off a node).
    const text = JSON.stringify(found);
    if (text === shown) return;
    shown = text;
    const app = found.appName || (found.definition && found.definition.appName) || (definition && definition.appName);
    latest = { run: found, nodes: runNodes(found, definition), app };
    render();
  });
  return el;
}
