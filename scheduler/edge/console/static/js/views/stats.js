// Statistics: task results and running counts over time, from /api/job/statistics/*.

import uPlot from "../../vendor/uPlot.esm.js";
import { fieldList, fill, h, href, note, section } from "../dom.js";

const PERIODS = {
  hour: { label: "Last hour", window: 3600e3, bucket: 60e3 },
  day: { label: "Last 24 hours", window: 86400e3, bucket: 15 * 60e3 },
  week: { label: "Last 7 days", window: 7 * 86400e3, bucket: 3600e3 },
};
// Per-minute results are kept for 24 hours (the API's `since=last24hours`).
const RESULTS_WINDOW = 86400e3;

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

function time(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : t;
}

// Sums of `rows` per bucket over [start, end): x in seconds, one array per key.
function buckets(rows, keys, start, end, size) {
  const count = Math.max(1, Math.ceil((end - start) / size));
  const xs = Array.from({ length: count }, (_, i) => (start + i * size) / 1000);
  const ys = keys.map(() => new Array(count).fill(0));
  for (const row of rows) {
    const t = time(row.statisticsTime);
    if (t === null || t < start || t >= end) continue;
    const i = Math.floor((t - start) / size);
    keys.forEach((key, k) => {
      ys[k][i] += Number(row[key]) || 0;
    });
  }
  return [xs, ...ys];
}

// Samples of `rows` in [start, end], thinned to at most one per `size` (the latest of each).
function samples(rows, key, start, end, size) {
  const picked = new Map();
  for (const row of rows) {
    const t = time(row.statisticsTime);
    if (t === null || t < start || t > end) continue;
    picked.set(Math.floor(t / size), [t / 1000, Number(row[key]) || 0]);
  }
  const points = [...picked.values()].sort((a, b) => a[0] - b[0]);
  return [points.map((p) => p[0]), points.map((p) => p[1])];
}

// Options of a time chart over `span` ({start, end} in epoch ms, updated by each poll),
// whatever the data covers.
function chartOptions(width, series, yLabel, span) {
  const text = css("--muted");
  const grid = css("--grid");
  const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  return {
    width,
    height: 240,
    series: [{}, ...series],
    scales: {
      x: { time: true, range: () => [span.start / 1000, span.end / 1000] },
      y: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] },
    },
    axes: [axis, { ...axis, label: yLabel, size: 50 }],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
}

function line(label, color, fillAlpha) {
  return {
    label,
    stroke: color,
    width: 2,
    fill: fillAlpha ? `${color}${fillAlpha}` : undefined,
  };
}

export function view(ctx) {
  const { api, query } = ctx;
  const period = PERIODS[query.get("period")] ? query.get("period") : "hour";
  const spec = PERIODS[period];
  const tabs = h(
    "div",
    { class: "tabs", role: "group", "aria-label": "Period" },
    Object.entries(PERIODS).map(([key, p]) =>
      h("a", { class: "tab", href: href(["stats"], { period: key }), "aria-pressed": String(key === period) }, p.label),
    ),
  );
  const resultsBox = h("div", { class: "chart", "data-chart": "results" });
  const resultsNote = h("div");
  const runningBox = h("div", { class: "chart", "data-chart": "running" });
  const runningNote = h("div");
  const totals = h("div");
  const jobsBox = h("div");
  const el = h(
    "div",
    { class: "view stats" },
    h("div", { class: "heading" }, h("h1", {}, "Statistics"), tabs),
    section("Task results", resultsBox, resultsNote),
    section("Running", runningBox, runningNote),
    h("div", { class: "columns" }, section("Totals", totals), section("Jobs", jobsBox)),
  );

  const charts = new Map(); // box -> {plot, build, data}
  const spans = { results: { start: 0, end: 0 }, running: { start: 0, end: 0 } };
  const draw = (box, build, data) => {
    const entry = charts.get(box);
    if (entry && entry.plot) {
      entry.plot.setData(data);
      entry.data = data;
      return;
    }
    const width = Math.max(280, box.clientWidth || 600);
    const plot = new uPlot(build(width), data, box);
    charts.set(box, { plot, build, data });
  };
  const rebuild = () => {
    for (const [box, entry] of charts) {
      entry.plot.destroy();
      box.replaceChildren();
      entry.plot = new uPlot(entry.build(Math.max(280, box.clientWidth || 600)), entry.data, box);
    }
  };
  const resize = new ResizeObserver(() => {
    for (const [box, entry] of charts) {
      const width = Math.max(280, box.clientWidth);
      if (entry.plot && Math.abs(entry.plot.width - width) > 2) entry.plot.setSize({ width, height: 240 });
    }
  });
  resize.observe(el);
  const scheme = matchMedia("(prefers-color-scheme: dark)");
  scheme.addEventListener("change", rebuild);
  ctx.onCleanup(() => {
    resize.disconnect();
    scheme.removeEventListener("change", rebuild);
    for (const entry of charts.values()) entry.plot.destroy();
  });

  ctx.every(60000, async () => {
    const [minutes, tasksRunning, jobsRunning, lastMinute, lastHour, lastWeek, online, types, execTypes, registered] =
      await Promise.all([
        api.get("/api/job/statistics/tasks/results", { since: "last24hours" }),
        api.get("/api/job/statistics/tasks/running", { since: "lastWeek" }),
        api.get("/api/job/statistics/jobs/running", { since: "lastWeek" }),
        api.get("/api/job/statistics/tasks/results/lastMinute"),
        api.get("/api/job/statistics/tasks/results/lastHour"),
        api.get("/api/job/statistics/tasks/results/lastWeek"),
        api.get("/api/job/statistics/tasks/results/online"),
        api.get("/api/job/statistics/jobs/type"),
        api.get("/api/job/statistics/jobs/executionType"),
        api.get("/api/job/statistics/jobs/register"),
      ]);
    if (!ctx.alive) return;
    const now = Date.now();
    const resultsSpan = Math.min(spec.window, RESULTS_WINDOW);
    const resultBucket = period === "week" ? 3600e3 : spec.bucket;
    const start = Math.floor((now - resultsSpan) / resultBucket) * resultBucket;
    const results = buckets(minutes || [], ["successCount", "failedCount"], start, now, resultBucket);
    Object.assign(spans.results, { start, end: now });
    Object.assign(spans.running, { start: now - spec.window, end: now });
    draw(resultsBox, (width) =>
      chartOptions(
        width,
        [line("successes", css("--ok"), "33"), line("failures", css("--bad"), "33")],
        `per ${resultBucket / 60e3 >= 60 ? "hour" : `${resultBucket / 60e3} min`}`,
        spans.results,
      ),
    results);
    fill(
      resultsNote,
      period === "week"
        ? note(`The API keeps per-minute results for 24 hours: the chart shows those; over the last 7 days there were ${lastWeek.successCount} successes and ${lastWeek.failedCount} failures.`, "note small")
        : null,
    );

    const [tx, ty] = samples(tasksRunning || [], "runningCount", now - spec.window, now, spec.bucket);
    const [jx, jy] = samples(jobsRunning || [], "runningCount", now - spec.window, now, spec.bucket);
    if (tx.length || jx.length) {
      // Both on the task samples' times (they are taken together, each minute).
      const xs = tx.length ? tx : jx;
      const jobsAt = new Map(jx.map((x, i) => [Math.round(x / 60), jy[i]]));
      const data = [xs, tx.length ? ty : xs.map(() => null), xs.map((x) => jobsAt.get(Math.round(x / 60)) ?? null)];
      draw(
        runningBox,
        (width) =>
          chartOptions(
            width,
            [line("running tasks", css("--accent"), "22"), line("running jobs", css("--warn"))],
            "count",
            spans.running,
          ),
        data,
      );
      fill(runningNote);
    } else {
      fill(runningNote, note("No sample yet: the leader samples running tasks and jobs every minute.", "note small"));
    }

    const latestRegistered = Array.isArray(registered) && registered.length ? registered[registered.length - 1].registeredCount : null;
    // The API's lastMinute and lastHour are the latest *whole* clock minute and hour (its
    // statistics rows); the last 60 minutes, as the chart shows them, are summed here from the
    // per-minute results, so the two never disagree (issue 30).
    const [, recentOk, recentFailed] = buckets(minutes || [], ["successCount", "failedCount"], now - 3600e3, now, 3600e3);
    const hourStart = new Date(Math.floor(now / 3600e3) * 3600e3 - 3600e3);
    const clock = (d) => d.toISOString().slice(11, 16);
    const registeredNow =
      (Number(types.simpleJobCount) || 0) + (Number(types.dataflowJobCount) || 0) + (Number(types.scriptJobCount) || 0);
    fill(
      totals,
      fieldList([
        ["Last 60 minutes", `${recentOk[0]} successes, ${recentFailed[0]} failures`],
        ["Last whole minute", `${lastMinute.successCount} successes, ${lastMinute.failedCount} failures`],
        [
          `Last whole hour (${clock(hourStart)}-${clock(new Date(hourStart.getTime() + 3600e3))} UTC)`,
          `${lastHour.successCount} successes, ${lastHour.failedCount} failures`,
        ],
        ["Last 7 days", `${lastWeek.successCount} successes, ${lastWeek.failedCount} failures`],
        ["Since the first record", `${online.successCount} successes, ${online.failedCount} failures`],
      ]),
    );
    fill(
      jobsBox,
      fieldList([
        ["By type", `${types.simpleJobCount} SIMPLE, ${types.dataflowJobCount} DATAFLOW, ${types.scriptJobCount} SCRIPT`],
        ["By execution", `${execTypes.transientJobCount} TRANSIENT, ${execTypes.daemonJobCount} DAEMON`],
        ["Registered now", `${registeredNow} jobs`],
        ["Registered at the latest daily sample", latestRegistered === null ? "no sample yet" : String(latestRegistered)],
      ]),
    );
  });
  return el;
}
