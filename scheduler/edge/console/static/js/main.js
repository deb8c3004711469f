// The console's shell: login, the header, hash routes and the polling of the view on screen.

import { Api, looksLikeToken } from "./api.js";
import { fill, h } from "./dom.js";
import { APP_ADMIN } from "./rights.js";
import * as access from "./views/access.js";
import * as apps from "./views/apps.js";
import * as audit from "./views/audit.js";
import * as calendars from "./views/calendars.js";
import * as jobs from "./views/jobs.js";
import * as jobForm from "./views/jobform.js";
import * as overview from "./views/overview.js";
import * as pools from "./views/pools.js";
import * as runs from "./views/runs.js";
import * as stats from "./views/stats.js";
import * as workflows from "./views/workflows.js";

const RELOAD_KEY = "ejcloud.console.reloadedAt";
const api = new Api();
const main = document.getElementById("view");
const banner = document.getElementById("banner");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

// Route patterns: ":name" takes one (decoded) segment.
const ROUTES = [
  ["", overview.view],
  ["apps", apps.list],
  ["apps/new", apps.form],
  ["apps/:app", apps.detail],
  ["apps/:app/edit", apps.form],
  ["jobs", jobs.list],
  ["jobs/new", jobForm.form],
  ["jobs/:job", jobs.detail],
  ["jobs/:job/edit", jobForm.form],
  ["runs", runs.list],
  ["runs/:job/:task", runs.detail],
  ["stats", stats.view],
  ["workflows", workflows.list],
  ["workflows/:workflow", workflows.detail],
  ["workflows/:workflow/runs/:run", workflows.run],
  ["calendars", calendars.listView],
  ["calendars/new", calendars.form],
  ["calendars/:calendar", calendars.detail],
  ["calendars/:calendar/edit", calendars.form],
  ["pools", pools.listView],
  ["pools/:pool", pools.detail],
  ["access", access.view],
  ["audit", audit.view],
];

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const cut = raw.indexOf("?");
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const query = new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1));
  let segments;
  try {
    segments = path ? path.split("/").map(decodeURIComponent) : [];
  } catch {
    segments = null;
  }
  return { segments, query };
}

function match(segments) {
  if (!segments) return null;
  for (const [pattern, view] of ROUTES) {
    const parts = pattern ? pattern.split("/") : [];
    if (parts.length !== segments.length) continue;
    const params = {};
    let ok = true;
    parts.forEach((part, i) => {
      if (part.startsWith(":")) params[part.slice(1)] = segments[i];
      else if (part !== segments[i]) ok = false;
    });
    if (ok) return { view, params };
  }
  return null;
}

// What a view gets: the API, the route's parameters and query, and timers bound to its life.
class ViewContext {
  constructor(params, query) {
    this.api = api;
    this.params = params;
    this.query = query;
    this.alive = true;
    this._pollers = [];
    this._cleanups = [];
  }

  get canWrite() {
    return api.canWrite;
  }

  get rights() {
    return api.rights;
  }

  // Whether the logged-in principal holds at least `role` on `app` (rights.js): the controls a
  // view draws. The API checks every request anyway.
  may(role, app) {
    return api.rights.may(role, app);
  }

  // At least `role` on some app: whether a control that picks its app is worth showing.
  mayAny(role) {
    return api.rights.mayAny(role);
  }

  // Runs `fn` now and then every `ms` while the view is shown and the tab is visible.
  every(ms, fn) {
    const poller = { ms, fn, timer: null, running: false, again: false };
    const tick = async () => {
      poller.timer = null;
      if (!this.alive) return;
      if (poller.running) {
        // Asked while a run is on its way (a click on "More jobs", say): once more right after
        // it, not at the next period (the click seemed lost for up to `ms`).
        poller.again = true;
        return;
      }
      if (!document.hidden) {
        poller.running = true;
        try {
          await fn();
          showProblem("");
        } catch (error) {
          if (this.alive) showProblem(error.message || String(error));
        } finally {
          poller.running = false;
        }
      }
      if (this.alive) {
        const soon = poller.again;
        poller.again = false;
        poller.timer = setTimeout(tick, soon ? 0 : poller.ms);
      }
    };
    poller.tick = tick;
    this._pollers.push(poller);
    tick();
    return {
      now: () => {
        clearTimeout(poller.timer);
        return tick();
      },
      stop: () => {
        clearTimeout(poller.timer);
        poller.timer = null;
        this._pollers = this._pollers.filter((p) => p !== poller);
      },
    };
  }

  onCleanup(fn) {
    this._cleanups.push(fn);
  }

  // Replace the query of the current hash without a new route (filters stay bookmarkable).
  setQuery(values) {
    const params = new URLSearchParams(this.query);
    for (const [key, value] of Object.entries(values)) {
      if (value === undefined || value === null || value === "") params.delete(key);
      else params.set(key, String(value));
    }
    this.query = params;
    const base = location.hash.split("?")[0] || "#/";
    const qs = params.toString();
    history.replaceState(null, "", `${base}${qs ? `?${qs}` : ""}`);
  }

  wake() {
    for (const poller of this._pollers) {
      clearTimeout(poller.timer);
      poller.tick();
    }
  }

  destroy() {
    this.alive = false;
    for (const poller of this._pollers) clearTimeout(poller.timer);
    for (const fn of this._cleanups) fn();
  }
}

let current = null;

function showProblem(text) {
  const problem = text;
  if (problem) {
    fill(banner, problem);
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
}

let shownStandby = null; // whether the view on screen is the standby page

function renderHeader() {
  const parts = [];
  if (api.standby) {
    nav.hidden = true;
    parts.push(h("span", { class: "leader bad" }, "standby"));
  } else if (api.loggedIn) {
    nav.hidden = false;
    parts.push(
      h("span", { class: "leader", title: "This replica serves the API" }, `leader ${api.own || "?"} (this replica)`),
    );
    const role = api.identify ? api.rights.label() : "…";
    parts.push(
      h(
        "span",
        { class: "user", "data-role": api.identify || "", "data-principal": api.principal, title: api.principal },
        api.authOff ? `auth off (${role})` : `${api.who} (${role})`,
      ),
    );
    if (!api.authOff) {
      parts.push(
        h("button", { type: "button", class: "secondary small", onclick: logout }, "Log out"),
      );
    }
  } else {
    nav.hidden = true;
  }
  fill(who, parts);
}

// The Access and Audit pages are for cluster-admins and app-admins only (the API refuses the
// others anyway).
function showAdminNav() {
  const admin = api.loggedIn && api.rights.mayAny(APP_ADMIN);
  for (const a of nav.querySelectorAll("[data-admin]")) a.hidden = !admin;
}

function setActiveNav(segments) {
  const top = (segments && segments[0]) || "";
  for (const a of nav.querySelectorAll("a")) {
    if (a.dataset.nav === top) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function logout() {
  const problem = await api.logout();
  await route();
  showProblem(problem);
}

// On a standby: what it is, and the leader's console when this replica vouches for the leader.
function standbyView() {
  const own = api.own ? ` (${api.own})` : "";
  const body = [
    h("h1", {}, "This replica is a standby"),
    h(
      "p",
      {},
      `This replica${own} does not serve the API now; only the acting leader does, and the console logs in there.`,
    ),
  ];
  if (api.leaderConsole) {
    body.push(
      h("p", {}, `The leader is ${api.leader}, and this replica vouches for it.`),
      h("p", {}, h("a", { class: "button primary", href: api.leaderConsole, "data-leader-console": api.leader }, "Open the leader's console")),
    );
  } else if (api.leader) {
    body.push(
      h("p", { class: "muted" }, `The election names ${api.leader}, but this replica cannot vouch for it yet; this page checks again every few seconds.`),
    );
  } else {
    body.push(h("p", { class: "muted" }, "No acting leader is known right now; this page checks again every few seconds."));
  }
  return h("section", { class: "card standby", "data-standby": api.own || "" }, body);
}

// Log in with a user and password, or with an API token (a CI pipeline's, say): either gives a
// session cookie; neither is kept by the page.
function loginView() {
  const user = h("input", { name: "user", autocomplete: "username", required: true });
  const password = h("input", {
    name: "password",
    type: "password",
    autocomplete: "current-password",
    required: true,
  });
  const token = h("input", {
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "ejc_…",
  });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Log in");
  const passwordBox = h(
    "div",
    { class: "login-fields", "data-login": "password" },
    h("div", { class: "field" }, h("label", { for: "login-user" }, "User"), user),
    h("div", { class: "field" }, h("label", { for: "login-password" }, "Password"), password),
  );
  const tokenBox = h(
    "div",
    { class: "login-fields", "data-login": "token", hidden: true },
    h(
      "div",
      { class: "field" },
      h("label", { for: "login-token" }, "API token"),
      token,
      h("small", { class: "help" }, "The token acts with its role on its app, never more than its owner holds."),
    ),
  );
  let mode = "password";
  const tabs = [
    ["password", "User and password"],
    ["token", "API token"],
  ].map(([name, text]) =>
    h("button", { type: "button", class: "tab", "data-login-tab": name, "aria-pressed": String(name === mode) }, text),
  );
  for (const tab of tabs) {
    tab.addEventListener("click", () => {
      mode = tab.dataset.loginTab;
      for (const t of tabs) t.setAttribute("aria-pressed", String(t === tab));
      passwordBox.hidden = mode !== "password";
      tokenBox.hidden = mode !== "token";
      error.hidden = true;
      (mode === "token" ? token : user).focus();
    });
  }
  const form = h(
    "form",
    { class: "login card", id: "login", novalidate: true },
    h("h1", {}, "Log in"),
    h("p", { class: "muted" }, "Use your scheduler user or an API token: what you may see and change is what your roles allow."),
    h("div", { class: "tabs", role: "group", "aria-label": "How to log in" }, tabs),
    passwordBox,
    tokenBox,
    error,
    h("div", { class: "actions" }, submit),
  );
  user.id = "login-user";
  password.id = "login-password";
  token.id = "login-token";
  const refuse = (text, input) => {
    error.textContent = text;
    error.hidden = false;
    input.select();
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const text = token.value.trim();
    if (mode === "token" && !looksLikeToken(text)) {
      refuse("That is not an API token: it looks like ejc_ followed by 12 and 48 hex digits.", token);
      return;
    }
    submit.disabled = true;
    try {
      const ok = mode === "token" ? await api.loginToken(text) : await api.login(user.value, password.value);
      if (!ok) {
        if (mode === "token") refuse("Wrong, revoked or expired token (or too many failed attempts from here).", token);
        else refuse("Wrong user or password (or too many failed attempts from here).", password);
        return;
      }
      token.value = "";
      password.value = "";
      route();
    } catch (e) {
      error.textContent = `Could not log in: ${e.message || e}`;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

async function route() {
  if (current) current.destroy();
  current = null;
  shownStandby = api.standby;
  if (api.standby) {
    renderHeader();
    setActiveNav(null);
    fill(main, standbyView());
    return;
  }
  const fresh = !api.checked;
  if (fresh) {
    try {
      await api.whoami();
    } catch (error) {
      if (api.standby) return route();
      showProblem(error.message);
    }
  }
  renderHeader();
  showAdminNav();
  if (!api.loggedIn) {
    setActiveNav(null);
    const form = loginView();
    fill(main, form);
    form.querySelector("input").focus();
    return;
  }
  const { segments, query } = parseHash();
  setActiveNav(segments);
  const found = match(segments);
  if (!found) {
    fill(main, h("section", { class: "card" }, h("h1", {}, "Not found"), h("p", {}, "No such page. "), h("a", { href: "#/" }, "Overview")));
    return;
  }
  const ctx = new ViewContext(found.params, query);
  current = ctx;
  const el = found.view(ctx);
  fill(main, el);
  window.scrollTo(0, 0);
  if (!fresh && !api.authOff) {
    // Grants change while the page is open: a new page asks again who this session is. Different
    // rights redraw the view (the "role" event); an ended session shows the login.
    api.whoami().catch(() => {});
  }
}

async function start() {
  try {
    await api.discover();
  } catch {
    // The replica answered but not as expected: the next API call tries again.
  }
  showProblem("");
  api.addEventListener("leader", () => {
    if (api.standby !== shownStandby) {
      // This replica became a standby, or the leader: another page altogether.
      showProblem("");
      route();
      return;
    }
    if (api.standby) fill(main, standbyView());
    renderHeader();
    showProblem("");
    if (current) current.wake();
  });
  api.addEventListener("role", () => {
    // A different role shows different controls: draw the view again.
    if (current) route();
    else renderHeader();
  });
  api.addEventListener("unauthorized", () => route());
  // The page may connect only to the replicas it was served with (its Content-Security-Policy);
  // a leader that joined later needs the page again, with a policy that names it.
  document.addEventListener("securitypolicyviolation", (event) => {
    if (event.effectiveDirective !== "connect-src") return;
    const last = Number(sessionStorage.getItem(RELOAD_KEY) || 0);
    if (Date.now() - last > 30000) {
      sessionStorage.setItem(RELOAD_KEY, String(Date.now()));
      location.reload();
    }
  });
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && current) current.wake();
  });
  // Follow the leader even when the view polls nothing (a standby's page more often).
  const follow = () => {
    if (!document.hidden) api.rediscover();
    setTimeout(follow, api.standby ? 3000 : 10000);
  };
  setTimeout(follow, api.standby ? 3000 : 10000);
  route();
}

start();
