// Access: users (cluster-admins), grants and API tokens (cluster-admins, and app-admins for their
// apps), through /api/access/users|grants|tokens. A new token's secret is shown once, here, with a
// copy button: the server keeps only its digest, and the page forgets it when it is dismissed
// (it never goes into the URL, a toast or storage).

import { segment } from "../api.js";
import {
  actionButton,
  badge,
  button,
  confirmDialog,
  field,
  fill,
  h,
  note,
  section,
  showFieldErrors,
  table,
  timeEl,
  toast,
} from "../dom.js";
import { ANY_APP, APP_ADMIN } from "../rights.js";

const USERS = "/api/access/users";
const GRANTS = "/api/access/grants";
const TOKENS = "/api/access/tokens";
const APPS_LISTED = 1000;
const EXPIRY = [
  ["2592000", "in 30 days"],
  ["86400", "in 1 day"],
  ["604800", "in 7 days"],
  ["7776000", "in 90 days"],
  ["31536000", "in 1 year"],
  ["", "never"],
];

// A time the API gives as epoch milliseconds or ISO 8601.
function when(value) {
  if (typeof value === "number" && value > 1e11) return timeEl(new Date(value).toISOString());
  return timeEl(value === undefined ? null : value);
}

function itemsOf(answer) {
  if (Array.isArray(answer)) return answer;
  return (answer && Array.isArray(answer.items) && answer.items) || [];
}

// A list's first page (the API answers at most max_list_items without a cursor), and a note
// when the server holds more than it.
function listed(render, answer, what) {
  const items = itemsOf(answer);
  const more = answer && !Array.isArray(answer) && answer.nextCursor;
  return [
    render(items),
    more ? note(`The first ${items.length} ${what} are shown; the server holds more (the API and the CLI page through them).`) : null,
  ];
}

// field(), with ids of this form's own (two forms here have a `name` field).
function formField(form, label, control, help) {
  const box = field(label, control, help);
  const id = `${form}-${control.getAttribute("name")}`;
  control.id = id;
  box.querySelector("label").htmlFor = id;
  return box;
}

function options(select, pairs, keep) {
  const previous = keep ? select.value : "";
  fill(select, pairs.map(([value, text]) => h("option", { value }, text)));
  if (pairs.some(([value]) => value === previous)) select.value = previous;
}

function roleBadge(role) {
  const kind = role === "cluster-admin" || role === "app-admin" ? "warn" : role === "viewer" ? "muted" : "info";
  return badge(String(role), kind);
}

function appText(app) {
  return app === ANY_APP ? h("span", {}, h("code", {}, "*"), h("span", { class: "muted" }, " (every app)")) : String(app);
}

export function view(ctx) {
  const { api, rights } = ctx;
  if (!rights.mayAny(APP_ADMIN)) {
    return h(
      "div",
      { class: "view" },
      h("h1", {}, "Access"),
      note("Only cluster-admins and the admins of an app manage users, grants and tokens."),
    );
  }
  const admin = rights.isClusterAdmin;
  // The apps this caller may hand out roles on; `*` (every app) for cluster-admins only.
  let apps = [];
  const appChoices = () => {
    const names = rights.mayEverywhere(APP_ADMIN) ? apps : rights.appsWith(APP_ADMIN);
    const pairs = names.map((name) => [name, name]);
    return admin ? [[ANY_APP, "* (every app)"], ...pairs] : pairs;
  };
  const roleChoices = (app) => rights.grantable(app).map((role) => [role, role]);
  const appSelects = [];
  // Revoking on an app is its admins'; on every app, or of a cluster-admin, a cluster-admin's.
  const mayRevokeOn = (app, role) =>
    admin || (app !== ANY_APP && role !== "cluster-admin" && rights.may(APP_ADMIN, app));

  const usersBox = h("div");
  const grantsBox = h("div");
  const tokensBox = h("div");
  const secretBox = h("div", { "data-secret-box": "" });
  const el = h(
    "div",
    { class: "view access" },
    h("h1", {}, "Access"),
    h(
      "p",
      { class: "muted" },
      admin
        ? "You are a cluster-admin: every user, grant and token."
        : `You administer ${rights.mayEverywhere(APP_ADMIN) ? "every app" : rights.appsWith(APP_ADMIN).join(", ")}: its grants and tokens.`,
    ),
    admin ? section("Users", usersBox, userForm()) : null,
    section("Grants", grantsBox, grantForm()),
    section("API tokens", secretBox, tokensBox, tokenForm()),
  );

  const poll = ctx.every(15000, async () => {
    const [appList, users, grants, tokens] = await Promise.all([
      rights.mayEverywhere(APP_ADMIN) ? api.get("/api/app/list", { limit: APPS_LISTED }) : Promise.resolve([]),
      admin ? api.get(USERS) : Promise.resolve(null),
      api.get(GRANTS),
      api.get(TOKENS),
    ]);
    if (!ctx.alive) return;
    apps = itemsOf(appList).map((a) => a.appName).sort();
    for (const [select, onChange] of appSelects) {
      const before = select.value;
      options(select, appChoices(), true);
      if (select.value !== before) onChange();
    }
    if (admin) fill(usersBox, listed(usersTable, users, "users"));
    fill(grantsBox, listed(grantsTable, grants, "grants"));
    fill(tokensBox, listed(tokensTable, tokens, "tokens"));
  });

  // --- users ----------------------------------------------------------------------------------
  function usersTable(users) {
    return table(
      [
        { label: "User", cell: (u) => String(u.name) },
        { label: "Created", cell: (u) => when(u.createdAt) },
        {
          label: "",
          cell: (u) =>
            actionButton(
              "Delete",
              async () => {
                const ok = await confirmDialog({
                  title: `Delete user ${u.name}?`,
                  lines: ["The user can no longer log in, and the tokens it made grant nothing from now on."],
                  confirmText: "Delete user",
                  danger: true,
                });
                if (!ok) return;
                await api.del(`${USERS}/${segment(u.name)}`);
                toast(`User ${u.name} deleted`);
                await poll.now();
              },
              { class: "small danger", "data-action": "delete-user", "data-user": u.name },
            ),
        },
      ],
      users,
      "No user yet: the settings' admin and guest accounts are not listed here.",
      { "data-table": "users" },
    );
  }

  function userForm() {
    const name = h("input", { name: "name", autocomplete: "off", required: true, spellcheck: "false" });
    const password = h("input", { name: "password", type: "password", autocomplete: "new-password", required: true });
    const general = h("p", { class: "error", role: "alert", hidden: true });
    const form = h(
      "form",
      { class: "form inline-form", novalidate: true, "data-form": "user" },
      h("h3", {}, "Add a user"),
      general,
      h(
        "div",
        { class: "grid" },
        formField("user", "Name", name, "Letters, digits and . _ @ -"),
        formField("user", "Password", password, "At least 8 characters; stored only as a hash."),
      ),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Add user")),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const submit = form.querySelector("button[type=submit]");
      submit.disabled = true;
      try {
        await api.post(USERS, { name: name.value.trim(), password: password.value });
        toast(`User ${name.value.trim()} added: grant it a role on an app below`);
        name.value = "";
        password.value = "";
        showFieldErrors(form, {}, general, "");
        await poll.now();
      } catch (error) {
        showFieldErrors(form, error.fields, general, error.message);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  // --- grants ---------------------------------------------------------------------------------
  function grantsTable(grants) {
    return table(
      [
        { label: "Principal", cell: (g) => h("code", {}, String(g.principal)) },
        { label: "Role", cell: (g) => roleBadge(g.role) },
        { label: "App", cell: (g) => appText(g.app) },
        {
          label: "",
          cell: (g) =>
            !mayRevokeOn(g.app, g.role)
              ? null
              : actionButton(
                  "Revoke",
                  async () => {
                    const ok = await confirmDialog({
                      title: `Revoke ${g.role} of ${g.principal}?`,
                      lines: [`On ${g.app === ANY_APP ? "every app" : `app ${g.app}`}; in force on every replica within a second.`],
                      confirmText: "Revoke",
                      danger: true,
                    });
                    if (!ok) return;
                    await api.del(`${GRANTS}/${segment(g.id)}`);
                    toast(`Grant revoked: ${g.principal} is no longer ${g.role}`);
                    await poll.now();
                  },
                  { class: "small danger", "data-action": "revoke-grant", "data-grant": g.id },
                ),
        },
      ],
      grants,
      "No grant yet.",
      { "data-table": "grants" },
    );
  }

  function grantForm() {
    const user = h("input", { name: "principal", autocomplete: "off", required: true, spellcheck: "false", placeholder: "alice" });
    const app = h("select", { name: "app" });
    const role = h("select", { name: "role" });
    const general = h("p", { class: "error", role: "alert", hidden: true });
    const syncRoles = () => options(role, roleChoices(app.value), true);
    app.addEventListener("change", syncRoles);
    appSelects.push([app, syncRoles]);
    options(app, appChoices(), false);
    syncRoles();
    const form = h(
      "form",
      { class: "form inline-form", novalidate: true, "data-form": "grant" },
      h("h3", {}, "Grant a role"),
      general,
      h(
        "div",
        { class: "grid three" },
        formField("grant", "User", user, "A user name (or user:NAME)."),
        formField("grant", "Role", role),
        formField("grant", "App", app),
      ),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Grant")),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const typed = user.value.trim();
      const principal = typed.startsWith("user:") ? typed : `user:${typed}`;
      const submit = form.querySelector("button[type=submit]");
      submit.disabled = true;
      try {
        await api.post(GRANTS, { principal, role: role.value, app: app.value });
        toast(`${principal} is now ${role.value} of ${app.value === ANY_APP ? "every app" : app.value}`);
        user.value = "";
        showFieldErrors(form, {}, general, "");
        await poll.now();
      } catch (error) {
        showFieldErrors(form, error.fields, general, error.message);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  // --- tokens ---------------------------------------------------------------------------------
  function tokensTable(tokens) {
    return table(
      [
        { label: "Id", cell: (t) => h("code", {}, String(t.id)) },
        { label: "Name", cell: (t) => String(t.name ?? "") },
        { label: "Role", cell: (t) => roleBadge(t.role) },
        { label: "App", cell: (t) => appText(t.app) },
        { label: "Owner", cell: (t) => (t.owner ? h("code", {}, String(t.owner)) : "—") },
        { label: "Created", cell: (t) => when(t.createdAt) },
        { label: "Expires", cell: (t) => (t.expiresAt ? when(t.expiresAt) : h("span", { class: "muted" }, "never")) },
        { label: "Last used", cell: (t) => (t.lastUsedAt ? when(t.lastUsedAt) : h("span", { class: "muted" }, "never")) },
        {
          label: "",
          cell: (t) =>
            !mayRevokeOn(t.app, t.role)
              ? null
              : actionButton(
                  "Revoke",
                  async () => {
                    const ok = await confirmDialog({
                      title: `Revoke token ${t.id}?`,
                      lines: [`${t.name ? `"${t.name}": ` : ""}it stops working on every replica within a second.`],
                      confirmText: "Revoke",
                      danger: true,
                    });
                    if (!ok) return;
                    await api.del(`${TOKENS}/${segment(t.id)}`);
                    toast(`Token ${t.id} revoked`);
                    await poll.now();
                  },
                  { class: "small danger", "data-action": "revoke-token", "data-token-id": t.id },
                ),
        },
      ],
      tokens,
      "No token yet.",
      { "data-table": "tokens" },
    );
  }

  // The new token's secret, once: a read-only field to select, a copy button and a warning.
  function showSecret(made) {
    const secret = h("input", { readonly: true, value: made.token, "data-token-secret": "", "aria-label": "The new token", spellcheck: "false" });
    const copy = button(
      "Copy",
      async () => {
        secret.select();
        try {
          if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(made.token);
          else if (!document.execCommand("copy")) throw new Error("copy refused");
          toast("Token copied");
        } catch {
          toast("Could not copy: select the token and copy it by hand", "bad");
        }
      },
      { class: "primary", "data-action": "copy-token" },
    );
    const done = button(
      "Done",
      () => {
        secret.value = "";
        fill(secretBox);
      },
      { class: "secondary", "data-action": "dismiss-token" },
    );
    fill(
      secretBox,
      h(
        "div",
        { class: "secret", role: "alert" },
        h("p", {}, h("strong", {}, `Token ${made.id} made`), `: ${made.role} of ${made.app === ANY_APP ? "every app" : made.app}`, made.expiresAt ? ", expires " : ", never expires", made.expiresAt ? when(made.expiresAt) : null, "."),
        h("p", { class: "warn-text" }, "Copy it now: this is the only time it is shown. The server keeps only a digest and cannot show it again. Send it as Authorization: Bearer <token>, or set EJCLOUD_TOKEN for the CLI."),
        h("div", { class: "secret-row" }, secret, copy, done),
      ),
    );
    secret.select();
  }

  function tokenForm() {
    const name = h("input", { name: "name", autocomplete: "off", required: true, placeholder: "ci-pipeline" });
    const app = h("select", { name: "app" });
    const role = h("select", { name: "role" });
    const expiry = h("select", { name: "expiresInSeconds" }, EXPIRY.map(([v, text]) => h("option", { value: v }, text)));
    const general = h("p", { class: "error", role: "alert", hidden: true });
    const syncRoles = () => options(role, roleChoices(app.value), true);
    app.addEventListener("change", syncRoles);
    appSelects.push([app, syncRoles]);
    options(app, appChoices(), false);
    syncRoles();
    const form = h(
      "form",
      { class: "form inline-form", novalidate: true, "data-form": "token" },
      h("h3", {}, "Make a token"),
      general,
      h(
        "div",
        { class: "grid four" },
        formField("token", "Name", name, "What it is for."),
        formField("token", "Role", role, "Never more than you hold."),
        formField("token", "App", app),
        formField("token", "Expires", expiry),
      ),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Make token")),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = { name: name.value.trim(), role: role.value, app: app.value };
      if (expiry.value) body.expiresInSeconds = Number(expiry.value);
      const submit = form.querySelector("button[type=submit]");
      submit.disabled = true;
      try {
        const made = await api.post(TOKENS, body);
        if (!made || typeof made.token !== "string") throw new Error("the server made the token but sent no secret");
        showSecret(made);
        name.value = "";
        showFieldErrors(form, {}, general, "");
        await poll.now();
      } catch (error) {
        showFieldErrors(form, error.fields, general, error.message);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  return el;
}
