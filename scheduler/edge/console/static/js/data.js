// Reading runs, tasks and states from the API, whichever endpoints this leader serves.

import { segment } from "./api.js";
import { badge, fireTimeEl, h, timeEl, toDate } from "./dom.js";

export const RUNS_PATH = "/api/job/{jobName}/runs";
export const LOG_PATH = "/api/job/{jobName}/runs/{taskId}/log";
export const NEXT_PATH = "/api/job/{jobName}/next-fire-times";
export const CRON_PATH = "/api/cron/next-fire-times";
export const KILL_PATH = "/api/job/{jobName}/kill";
export const TASK_KILL_PATH = "/api/job/tasks/{taskId}/kill";
export const TRACE_WINDOW = 1000;
// Issue 28: calendars, pools and backfills (the console shows them when the leader serves them).
export const CALENDARS_PATH = "/api/calendars";
export const POOLS_PATH = "/api/pools";
export const BACKFILLS_PATH = "/api/job/{jobName}/backfills";
// Event-trace states of fires that ran nothing (misfire off, the queue full, over the cluster's
// fire rate, or in a period one of the job's calendars excludes).
export const FIRE_EVENT_STATES = ["FIRE_EXCLUDED", "FIRE_SKIPPED", "FIRE_CAPPED", "FIRE_DELAYED"];

const SUCCESS = new Set(["TASK_FINISHED", "FINISHED", "SUCCESS", "SUCCEEDED", "OK"]);
const KILLED = new Set(["TASK_KILLED", "TASK_KILLING", "KILLED"]);
const RUNNING = new Set([
  "TASK_STAGING",
  "TASK_STARTING",
  "TASK_RUNNING",
  "STAGING",
  "STARTING",
  "RUNNING",
  "LAUNCHED",
]);

// Whether the leader serves `GET template` (issue 28's lists): its OpenAPI document says so, or
// else asking `path` does not answer 404 (a route added before its line in the document).
export async function serves(api, template, path, query) {
  if (await api.has("GET", template)) return true;
  try {
    await api.get(path, query);
    return true;
  } catch (error) {
    if (error.status === 404) return false;
    throw error;
  }
}

// success | failure | killed | running | unknown, or a fire event's own name (fire_excluded, ...)
export function resultOf(state) {
  const s = String(state || "").toUpperCase();
  if (FIRE_EVENT_STATES.includes(s)) return s.toLowerCase();
  if (SUCCESS.has(s)) return "success";
  if (KILLED.has(s)) return "killed";
  if (RUNNING.has(s)) return "running";
  if (s.startsWith("TASK_") || /FAIL|TIMEOUT|TIMED_OUT|ERROR|LOST/.test(s)) return "failure";
  return "unknown";
}

const KINDS = {
  success: "ok",
  failure: "bad",
  killed: "warn",
  running: "info",
  unknown: "muted",
  fire_excluded: "muted",
  fire_skipped: "warn",
  fire_capped: "warn",
  fire_delayed: "info",
};

export function stateBadge(state) {
  const result = resultOf(state);
  return badge(String(state || "?").replace(/^TASK_/, "").toLowerCase(), KINDS[result]);
}

export function resultBadge(result) {
  return badge(result, KINDS[result] || "muted");
}

// A run's logical fire time, marked when it is a backfill's (issue 28).
export function fireCell(run) {
  const time = run.fireTimeText ? fireTimeEl(run.fireTimeText) : run.fireTime ? timeEl(run.fireTime) : h("span", { class: "muted" }, "—");
  if (!run.backfillId) return time;
  return [time, " ", h("span", { "data-backfill-run": run.backfillId, title: `backfill ${run.backfillId}` }, badge("backfill", "info"))];
}

// A run's result; a fire that ran nothing (fire_excluded, ...) has no task state to show.
export function resultCell(run) {
  if (String(run.result).startsWith("fire_")) return resultBadge(run.result);
  return [resultBadge(run.result), " ", stateBadge(run.state)];
}

// Job name and shard from a task id `{job}@-@{item}@-@{type}@-@{agent}@-@{uuid}`.
export function parseTaskId(taskId) {
  const parts = String(taskId || "").split("@-@");
  return { jobName: parts[0] || "", shard: parts.length > 1 ? parts[1] : "" };
}

function first(item, keys) {
  for (const key of keys) {
    if (item[key] !== undefined && item[key] !== null) return item[key];
  }
  return null;
}

// Runs as the runs endpoint lists them (a list, or an object holding one).
export function runsFromEndpoint(data, jobName) {
  let items = data;
  if (data && !Array.isArray(data)) {
    items = ["runs", "items", "data"].map((k) => data[k]).find(Array.isArray) || [];
  }
  return (items || [])
    .filter((item) => item && typeof item === "object")
    .map((item) => {
      const taskId = first(item, ["taskId", "id"]);
      const state = first(item, ["state", "status", "result"]);
      let reason = first(item, ["reason", "message", "failureCause"]);
      if (reason && typeof reason === "object") reason = reason.plainText || JSON.stringify(reason);
      // A fire that ran nothing (issue 28's fire_excluded, ...) says so in its result.
      const said = typeof item.result === "string" ? item.result.toLowerCase() : "";
      const result = said.startsWith("fire_") ? said : resultOf(state);
      const backfillId = first(item, ["backfillId"]);
      return {
        taskId,
        jobName: item.jobName || jobName || parseTaskId(taskId).jobName,
        shard: first(item, ["shardingItem", "shard"]) ?? parseTaskId(taskId).shard,
        fireTime: toDate(first(item, ["fireTime"])),
        fireTimeText: typeof item.fireTime === "string" ? item.fireTime : null,
        state,
        result,
        backfillId: typeof backfillId === "string" && backfillId ? backfillId : null,
        start: toDate(first(item, ["startTime", "start"])),
        end: toDate(first(item, ["endTime", "end", "completeTime"])),
        reason: reason || "",
      };
    });
}

// Runs made from status trace rows (newest first): one per task id, with its trail.
export function runsFromTraces(rows) {
  const byTask = new Map();
  for (const row of rows) {
    if (!row || !row.taskId) continue;
    let run = byTask.get(row.taskId);
    if (!run) {
      const parsed = parseTaskId(row.taskId);
      run = { taskId: row.taskId, jobName: row.jobName || parsed.jobName, shard: parsed.shard, trail: [] };
      byTask.set(row.taskId, run);
    }
    run.trail.push(row);
  }
  const runs = [];
  for (const run of byTask.values()) {
    run.trail.sort(traceOrder);
    const last = run.trail[run.trail.length - 1];
    const result = resultOf(last.state);
    run.state = last.state;
    run.result = result;
    // A trail cut by the query's window may lack its first rows: then the start is unknown.
    run.start = run.trail[0].state === "TASK_STAGING" ? toDate(run.trail[0].creationTime) : null;
    run.end = result === "running" ? null : toDate(last.creationTime);
    run.reason = result === "success" || result === "running" ? "" : last.message || "";
    run.lastAt = Date.parse(last.creationTime) || 0;
    runs.push(run);
  }
  runs.sort((a, b) => b.lastAt - a.lastAt);
  return runs;
}

// Trace rows in the order they happened: by time, and a task's states in their natural order
// where two share a millisecond (row ids are random, so they cannot order them).
const STATE_RANK = { TASK_STAGING: 0, TASK_STARTING: 1, TASK_RUNNING: 2 };
export function traceOrder(a, b) {
  const byTime = (Date.parse(a.creationTime) || 0) - (Date.parse(b.creationTime) || 0);
  if (byTime) return byTime;
  return (STATE_RANK[a.state] ?? 3) - (STATE_RANK[b.state] ?? 3);
}

// A task has a handful of status rows: ask for enough of them for `runs` runs.
export function traceRows(runs) {
  return Math.min(TRACE_WINDOW, Math.max(60, runs * 6));
}

export function traceQuery({ job, since, until, limit }) {
  return {
    jobName: job || "",
    startTime: since ? since.toISOString() : "",
    endTime: until ? until.toISOString() : "",
    sort: "creationTime",
    order: "desc",
    per_page: traceRows(limit || 100),
  };
}

// A job's (or every job's) recent runs: {runs, source: "runs" | "traces"}.
export async function fetchRuns(api, { job, since, until, limit }) {
  if (job && (await api.has("GET", RUNS_PATH))) {
    const data = await api.get(`/api/job/${segment(job)}/runs`, { limit: Math.min(limit || 100, 1000) });
    let runs = runsFromEndpoint(data, job);
    if (since) runs = runs.filter((r) => !r.start || r.start >= since);
    if (until) runs = runs.filter((r) => !r.start || r.start <= until);
    return { runs, source: "runs" };
  }
  const data = await api.get("/api/job/events/statusTraces", traceQuery({ job, since, until, limit }));
  return { runs: runsFromTraces((data && data.rows) || []).slice(0, limit || 100), source: "traces" };
}

// The latest run of a job, or null.
export async function lastRun(api, job) {
  if (await api.has("GET", RUNS_PATH)) {
    const runs = runsFromEndpoint(await api.get(`/api/job/${segment(job)}/runs`, { limit: 1 }), job);
    return runs[0] || null;
  }
  const data = await api.get("/api/job/events/statusTraces", {
    jobName: job,
    sort: "creationTime",
    order: "desc",
    per_page: 1,
  });
  const row = data && data.rows && data.rows[0];
  if (!row) return null;
  const result = resultOf(row.state);
  return { taskId: row.taskId, state: row.state, result, end: toDate(row.creationTime) };
}

// Runs `fn` over `items`, at most `limit` at once; results in order.
export async function mapLimit(items, limit, fn) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        results[i] = await fn(items[i], i);
      } catch (error) {
        results[i] = error instanceof Error ? error : new Error(String(error));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

export function jobOfTask(task) {
  return (task && task.metaInfo && task.metaInfo.jobName) || parseTaskId(task && task.id).jobName;
}

export function shardsOfTask(task) {
  const items = task && task.metaInfo && task.metaInfo.shardingItems;
  return Array.isArray(items) ? items.join(",") : parseTaskId(task && task.id).shard;
}

// Sum of queued runs per job from /api/job/tasks/ready.
export function readyCounts(rows) {
  const counts = new Map();
  for (const row of rows || []) counts.set(row.jobName, Number(row.times) || 0);
  return counts;
}
