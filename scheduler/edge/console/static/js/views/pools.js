// Concurrency pools (issue 28): a named number of slots shared by every job that names it (`pool`,
// each shard taking `poolSlots`); the launcher never runs more than the pool's size of slots at
// once and holds the rest in the ready queue. The list with each pool's size, slots in use and
// waiting runs (refreshed like the other live pages), one pool with its member jobs, and
// add/resize/delete.
//
// Pools are cluster-wide: any logged-in principal reads them; writing takes `editor` on every
// app, so the controls show only for such a role (the API checks anyway).

import { segment } from "../api.js";
import { POOLS_PATH, mapLimit, serves } from "../data.js";
import {
  deleteButton,
  badge,
  field,
  fieldList,
  fill,
  h,
  link,
  note,
  numberOrText,
  section,
  showFieldErrors,
  table,
  toast,
} from "../dom.js";
import { mayWriteShared, pageOf } from "./calendars.js";

const PAGE = 1000;
const MAX_PAGES = 10;
const NOT_AVAILABLE = "Pools are not available on this server (its API has no /api/pools yet).";

const base = (name) => `/api/pool/${segment(name)}`;

// Every pool (up to MAX_PAGES pages of PAGE): {items, more}.
export async function allPools(api) {
  const items = [];
  let cursor = null;
  for (let n = 0; n < MAX_PAGES; n += 1) {
    const page = pageOf(await api.get(POOLS_PATH, cursor ? { limit: PAGE, cursor } : { limit: PAGE }));
    items.push(...page.items.filter((p) => p && typeof p === "object" && typeof p.poolName === "string"));
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  return { items, more: Boolean(cursor) };
}

const count = (value) => (Number.isFinite(Number(value)) && value !== null && value !== undefined ? Number(value) : null);

// "2 / 3" with a badge when full or over.
function useCell(pool) {
  const inUse = count(pool.inUse);
  const size = count(pool.size);
  if (inUse === null) return h("span", { class: "muted" }, "?");
  const kind = size !== null && inUse > size ? "bad" : size !== null && inUse >= size ? "warn" : "ok";
  return h("span", { "data-in-use": String(inUse) }, badge(`${inUse} / ${size ?? "?"}`, kind));
}

function waitingCell(pool) {
  const waiting = count(pool.waiting);
  if (waiting === null) return h("span", { class: "muted" }, "?");
  return h("span", { "data-waiting": String(waiting) }, waiting ? badge(String(waiting), "warn") : "0");
}

function sizeInput(value) {
  return h("input", { name: "size", inputmode: "numeric", autocomplete: "off", value: value === undefined ? "" : String(value) });
}

export function listView(ctx) {
  const { api } = ctx;
  const body = h("div");
  const total = h("span", { class: "muted" });
  const adder = mayWriteShared(ctx) ? addForm(ctx, () => poll.now()) : null;
  const el = h(
    "div",
    { class: "view" },
    h("div", { class: "heading" }, h("h1", {}, "Pools ", total)),
    note("A job that names a pool waits in the ready queue while its pool's slots are taken; the pool's jobs take turns."),
    body,
    adder,
  );
  const poll = ctx.every(5000, async () => {
    if (!(await serves(api, POOLS_PATH, POOLS_PATH, { limit: 1 }))) {
      fill(body, note(NOT_AVAILABLE));
      if (adder) adder.hidden = true;
      return;
    }
    const { items, more } = await allPools(api);
    // A list that leaves out the live counts: each pool's own answer has them.
    const details = await mapLimit(items, 4, (p) =>
      p.inUse === undefined || p.waiting === undefined ? api.get(base(p.poolName)) : p,
    );
    if (!ctx.alive) return;
    const rows = items.map((p, i) => (details[i] instanceof Error ? p : { ...p, ...details[i] }));
    total.textContent = more ? `(${rows.length}, more on the server)` : `(${rows.length})`;
    fill(
      body,
      table(
        [
          { label: "Pool", cell: (p) => link(["pools", p.poolName], p.poolName) },
          { label: "Size", cell: (p) => String(p.size ?? "?") },
          { label: "In use (slots)", cell: useCell },
          { label: "Waiting runs", cell: waitingCell },
          { label: "Jobs", cell: (p) => (Array.isArray(p.jobs) ? String(p.jobs.length) : "—") },
        ],
        rows,
        "No pool yet.",
        { "data-table": "pools" },
      ),
    );
  });
  return el;
}

function addForm(ctx, done) {
  const nameInput = h("input", { name: "poolName", autocomplete: "off", required: true });
  const size = sizeInput("");
  const general = h("p", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Add pool");
  const formEl = h(
    "form",
    { class: "card form", novalidate: true, "data-form": "pool" },
    h("h2", {}, "Add a pool"),
    general,
    h(
      "div",
      { class: "grid" },
      field("Name", nameInput, "Letters, digits, _ . - (the first not . or -)."),
      field("Size (slots)", size, "How many slots its jobs' tasks may hold at once (a shard takes its job's poolSlots)."),
    ),
    h("div", { class: "actions" }, submit),
  );
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { poolName: nameInput.value.trim(), size: numberOrText(size.value) };
    submit.disabled = true;
    try {
      await ctx.api.post("/api/pool", body);
      toast(`Pool ${body.poolName} added`);
      nameInput.value = "";
      size.value = "";
      general.hidden = true;
      await done();
    } catch (error) {
      showFieldErrors(formEl, error.fields, general, error.message);
    } finally {
      submit.disabled = false;
    }
  });
  return formEl;
}

export function detail(ctx) {
  const { api } = ctx;
  const name = ctx.params.pool;
  const body = h("div");
  const jobs = h("div");
  const problem = h("p", { class: "error", role: "alert", "data-error": "delete", hidden: true });
  const actions = h("div", { class: "actions" });
  const writer = mayWriteShared(ctx);
  const size = sizeInput("");
  const general = h("p", { class: "error", role: "alert", hidden: true });
  const resize = h(
    "form",
    { class: "inline-form", novalidate: true, "data-form": "resize", hidden: !writer },
    general,
    field("New size (slots)", size, "Below what one run of a member job needs is refused; tasks running over a smaller size finish, nothing new starts until they do."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Resize")),
  );
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["pools"], "Pools"), " / "),
    h("div", { class: "heading" }, h("h1", {}, "Pool ", name), actions),
    problem,
    section("Use", body, resize),
    section("Member jobs", jobs),
  );
  let known = null;
  const poll = ctx.every(3000, async () => {
    let pool;
    try {
      pool = await api.get(base(name));
    } catch (error) {
      if (error.status !== 404) throw error;
      fill(body, h("p", { class: "error" }, error.message));
      fill(jobs);
      fill(actions);
      resize.hidden = true;
      return;
    }
    if (!ctx.alive) return;
    // Prefilled once, and never under the user's typing (a field in focus is being edited).
    if (known === null && size.value === "" && document.activeElement !== size) size.value = String(pool.size ?? "");
    known = pool;
    fill(
      body,
      fieldList([
        ["Size (slots)", h("span", { "data-value": "size" }, String(pool.size ?? "?"))],
        ["In use (slots)", useCell(pool)],
        ["Waiting runs", waitingCell(pool)],
      ]),
    );
    const members = Array.isArray(pool.jobs) ? pool.jobs.map((j) => (j && typeof j === "object" ? j.jobName : j)).filter(Boolean).map(String) : [];
    fill(
      jobs,
      members.length
        ? h("ul", { "data-list": "pool-jobs" }, members.map((job) => h("li", {}, link(["jobs", job], job))))
        : note("No job you can see is in this pool. A job joins it with its pool field (the job's Edit form)."),
    );
  });
  resize.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = resize.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      await api.put(base(name), { poolName: name, size: numberOrText(size.value) });
      toast(`Pool ${name} resized to ${size.value.trim()}`);
      general.hidden = true;
      await poll.now();
    } catch (error) {
      showFieldErrors(resize, error.fields, general, error.message);
    } finally {
      button.disabled = false;
    }
  });
  if (writer) {
    fill(
      actions,
      deleteButton({
        what: "pool",
        name,
        lines: ["A pool that jobs still name is not deleted: the server names them."],
        remove: () => api.del(base(name)),
        problem,
        back: "#/pools",
      }),
    );
  }
  return el;
}
