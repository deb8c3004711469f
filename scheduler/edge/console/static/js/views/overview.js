// Overview: the replicas and what the cluster holds and does now.

import { validIdentity } from "../api.js";
import { jobOfTask, mapLimit, readyCounts, shardsOfTask, stateBadge } from "../data.js";
import { badge, fill, h, href, link, section, table, timeEl } from "../dom.js";

const FAILURE_STATES = ["TASK_FAILED", "TASK_ERROR", "TASK_LOST"];

function tile(label, value, to, name) {
  const body = [h("span", { class: "tile-value", "data-count": name }, value), h("span", { class: "tile-label" }, label)];
  return to ? h("a", { class: "tile", href: to }, body) : h("div", { class: "tile" }, body);
}

function replicaRows(identities, answers, own, leader) {
  return identities.map((identity, i) => {
    const { status, body } = answers[i] || {};
    return { identity, status, body: body || null, own: identity === own, leader: identity === leader };
  });
}

export function view(ctx) {
  const { api } = ctx;
  const tiles = h("div", { class: "tiles" });
  const replicas = h("div");
  const running = h("div");
  const failures = h("div");
  const el = h(
    "div",
    { class: "view overview" },
    h("h1", {}, "Overview"),
    tiles,
    section("Replicas", replicas),
    h("div", { class: "columns" }, section("Running tasks", running), section("Recent failures", failures)),
  );

  ctx.every(5000, async () => {
    // The replicas this one vouches for (its /health's `replicas`, its own included): the
    // others' public /health is read without credentials.
    const ownHealth = await api.discover();
    const identities = [];
    for (const identity of [...(ownHealth.replicas || []), ownHealth.identity]) {
      if (validIdentity(identity) && !identities.includes(identity)) identities.push(identity);
    }
    const hourAgo = new Date(Date.now() - 3600 * 1000).toISOString();
    const [answers, appList, jobList, tasks, ready, failover, failed] = await Promise.all([
      mapLimit(identities, 4, (identity) => api.healthOf(identity)),
      api.get("/api/app/list"),
      api.get("/api/job/jobs"),
      api.get("/api/job/tasks/running"),
      api.get("/api/job/tasks/ready"),
      api.get("/api/job/tasks/failover"),
      Promise.all(
        FAILURE_STATES.map((state) =>
          api.get("/api/job/events/statusTraces", { state, startTime: hourAgo, per_page: 1 }),
        ),
      ),
    ]);
    if (!ctx.alive) return;
    const queued = [...readyCounts(ready).values()].reduce((a, b) => a + b, 0);
    const failedLastHour = failed.reduce((sum, page) => sum + ((page && page.total) || 0), 0);
    fill(
      tiles,
      tile("apps", appList.length, "#/apps", "apps"),
      tile("jobs", jobList.length, "#/jobs", "jobs"),
      tile("running tasks", tasks.length, null, "running"),
      tile("queued runs", queued, null, "queued"),
      tile("failover queue", failover.length, null, "failover"),
      tile("failures in the last hour", failedLastHour, href(["runs"], { result: "failure", since: "1h" }), "failures"),
    );

    const rows = replicaRows(identities, answers, api.own, api.leader);
    fill(
      replicas,
      table(
        [
          {
            label: "Replica",
            cell: (r) => [
              r.own ? h("span", {}, r.identity) : h("a", { href: `${location.protocol}//${r.identity}/` }, r.identity),
              r.own ? h("span", { class: "muted" }, " (this page)") : null,
            ],
          },
          {
            label: "Role",
            cell: (r) =>
              r.body ? badge(r.body.role || "?", r.body.role === "leader" ? "ok" : "muted") : badge("unreachable", "bad"),
          },
          { label: "ZooKeeper", cell: (r) => (r.body ? connection(r.body.zookeeper, "CONNECTED") : "—") },
          { label: "Mesos", cell: (r) => (r.body && r.body.mesos ? connection(r.body.mesos, "connected") : "—") },
          {
            label: "Term",
            cell: (r) =>
              r.body && r.body.term
                ? [`#${r.body.term.number} since `, timeEl(r.body.term.startedAt)]
                : h("span", { class: "muted" }, "—"),
          },
          {
            label: "Health",
            cell: (r) =>
              !r.body ? "no answer" : r.body.reason ? badge(r.body.reason, "bad") : badge("ok", "ok"),
          },
        ],
        rows,
        "No replica is known (ZooKeeper not reachable?).",
        { "data-table": "replicas" },
      ),
    );

    const shown = tasks.slice(0, 10);
    fill(
      running,
      table(
        [
          { label: "Job", cell: (t) => link(["jobs", jobOfTask(t)], jobOfTask(t)) },
          { label: "Shard", cell: (t) => shardsOfTask(t) },
          { label: "Host", cell: (t) => t.hostname || t.slaveId || "—" },
          { label: "Since", cell: (t) => timeEl(t.launchedAt || null) },
          { label: "Task", cell: (t) => link(["runs", jobOfTask(t), t.id], "run", null, { title: t.id }) },
        ],
        shown,
        "Nothing is running.",
      ),
      tasks.length > shown.length ? h("p", { class: "muted" }, `and ${tasks.length - shown.length} more`) : null,
    );

    const recent = await api.get("/api/job/events/statusTraces", {
      state: "TASK_FAILED",
      sort: "creationTime",
      order: "desc",
      per_page: 5,
    });
    if (!ctx.alive) return;
    fill(
      failures,
      table(
        [
          { label: "When", cell: (r) => timeEl(r.creationTime) },
          { label: "Job", cell: (r) => link(["jobs", r.jobName], r.jobName) },
          { label: "State", cell: (r) => stateBadge(r.state) },
          { label: "Reason", cell: (r) => h("span", { class: "reason" }, r.message || "—") },
          { label: "Run", cell: (r) => link(["runs", r.jobName, r.taskId], "details") },
        ],
        (recent && recent.rows) || [],
        "No failed task in the event trace.",
      ),
    );
  });
  return el;
}

function connection(state, good) {
  const text = String(state);
  const ok = text === good || text.startsWith(`${good}`);
  return badge(text.length > 60 ? `${text.slice(0, 59)}…` : text, ok ? "ok" : "bad");
}
