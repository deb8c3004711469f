// What the logged-in principal may do, from GET /api/session's `rights`
// ({"everywhere": role|null, "apps": {app: role}}), for drawing only the controls its role allows.
// This is a courtesy: the API checks every request and stays the authority (a 403 or 404 it
// answers is still shown).

// From least to most; a greater role includes every lesser one.
export const ROLES = ["viewer", "operator", "editor", "app-admin", "cluster-admin"];
export const VIEWER = "viewer";
export const OPERATOR = "operator";
export const EDITOR = "editor";
export const APP_ADMIN = "app-admin";
export const CLUSTER_ADMIN = "cluster-admin";
export const ANY_APP = "*";

function rank(role) {
  return ROLES.indexOf(role); // -1: none (or a name this console does not know)
}

export class Rights {
  // `everywhere`: a role on every app (or null); `apps`: {app: role}.
  constructor(everywhere, apps) {
    this.everywhere = rank(everywhere) >= 0 ? everywhere : null;
    this.apps = new Map();
    for (const [app, role] of Object.entries(apps && typeof apps === "object" ? apps : {})) {
      if (rank(role) >= 0) this.apps.set(String(app), role);
    }
  }

  // From the session's answer; older servers send no `rights`: their `role` (identify) says
  // root (cluster-admin) or guest (viewer of every app).
  static fromSession(found, authOff) {
    if (authOff) return new Rights(CLUSTER_ADMIN, {});
    if (!found) return new Rights(null, {});
    const rights = found.rights;
    if (rights && typeof rights === "object") return new Rights(rights.everywhere, rights.apps);
    if (found.role === "root") return new Rights(CLUSTER_ADMIN, {});
    if (found.role === "guest") return new Rights(VIEWER, {});
    return new Rights(null, {});
  }

  // The greatest role on `app`, or null (the app is not visible).
  roleOn(app) {
    const own = this.apps.get(String(app)) || null;
    if (!this.everywhere) return own;
    if (!own) return this.everywhere;
    return rank(own) > rank(this.everywhere) ? own : this.everywhere;
  }

  may(role, app) {
    const held = this.roleOn(app);
    return held !== null && rank(held) >= rank(role);
  }

  // At least `role` on every app.
  mayEverywhere(role) {
    return this.everywhere !== null && rank(this.everywhere) >= rank(role);
  }

  // At least `role` on some app (or everywhere).
  mayAny(role) {
    if (this.mayEverywhere(role)) return true;
    for (const held of this.apps.values()) if (rank(held) >= rank(role)) return true;
    return false;
  }

  get isClusterAdmin() {
    return this.everywhere === CLUSTER_ADMIN;
  }

  // The apps on which the principal holds at least `role` (not counting `everywhere`).
  appsWith(role) {
    return [...this.apps.entries()].filter(([, held]) => rank(held) >= rank(role)).map(([app]) => app).sort();
  }

  // Roles the principal may hand out on `app` (a grant or a token): up to its own role there;
  // cluster-admin only on every app (`*`), so only by a cluster-admin.
  grantable(app) {
    const held = app === ANY_APP ? this.everywhere : this.roleOn(app);
    if (!held) return [];
    return ROLES.filter((role) => rank(role) <= rank(held) && (role !== CLUSTER_ADMIN || app === ANY_APP));
  }

  // For the header: "admin", "read-only", or the roles per app.
  label() {
    if (this.isClusterAdmin) return "admin";
    const upgraded = [...this.apps.entries()].filter(([, role]) => rank(role) > rank(this.everywhere));
    if (this.everywhere === VIEWER && !upgraded.length) return "read-only";
    const parts = [];
    if (this.everywhere) parts.push(`${this.everywhere} of every app`);
    const shown = upgraded.slice(0, 3).map(([app, role]) => `${role} of ${app}`);
    parts.push(...shown);
    if (upgraded.length > shown.length) parts.push(`+${upgraded.length - shown.length} apps`);
    return parts.length ? parts.join(", ") : "no role";
  }

  key() {
    return JSON.stringify([this.everywhere, [...this.apps.entries()].sort()]);
  }
}
