// The console's shell: login, navigation between pages (the part of the URL after #), and the
// refresh interval at which the shown page and the overview's charts poll the API (the Qpid
// management console's "Refresh Interval").

import * as api from "./api.js";
import { clearStatus, h, replace, say } from "./dom.js";
import * as overview from "./pages/overview.js";
import * as queues from "./pages/queues.js";
import * as queue from "./pages/queue.js";
import * as exchanges from "./pages/exchanges.js";
import * as connections from "./pages/connections.js";
import * as admin from "./pages/admin.js";
import * as alarms from "./pages/alarms.js";
import * as cluster from "./pages/cluster.js";
import * as log from "./pages/log.js";

// [pattern of the path after "#", page, navigation link it belongs to]
const PAGES = [
  [/^\/?$/, overview, "#/"],
  [/^\/queues$/, queues, "#/queues"],
  [/^\/queues\/([^/]+)\/([^/]+)$/, queue, "#/queues"],
  [/^\/exchanges$/, exchanges, "#/exchanges"],
  [/^\/connections$/, connections, "#/connections"],
  [/^\/admin$/, admin, "#/admin"],
  [/^\/alarms$/, alarms, "#/alarms"],
  [/^\/cluster$/, cluster, "#/cluster"],
  [/^\/log$/, log, "#/log"],
];

const session = { user: null, current: null, timer: null, busy: false, shown: 0 };

function element(id) {
  return document.getElementById(id);
}

function loggedIn(whoami) {
  session.user = whoami;
  element("login").hidden = true;
  for (const id of ["nav", "logout", "refresh-label"]) element(id).hidden = false;
  replace(element("who"), `${whoami.name} (${whoami.tags.join(", ") || "no tags"})`);
  restartTimer();
  route();
}

function showLogin(message = "") {
  session.user = null;
  session.current = null;
  clearInterval(session.timer);
  overview.forget();
  for (const id of ["nav", "logout", "refresh-label"]) element(id).hidden = true;
  replace(element("who"));
  replace(element("view"));
  clearStatus();
  element("login").hidden = false;
  replace(element("login-error"), message);
  element("login").elements.user.focus();
}

async function login(event) {
  event.preventDefault();
  const form = event.target;
  api.remember(form.elements.user.value, form.elements.password.value);
  form.elements.password.value = "";
  try {
    loggedIn(await api.get("/api/whoami"));
  } catch (error) {
    api.forget();
    // RabbitMQ's console says "Login failed" for a wrong password and a user without a tag.
    showLogin(error.status === 401 ? "Login failed" : error.message);
  }
}

// The API's reason when the credentials no longer log in (a refusal for want of a tag has
// another reason, and keeps the user logged in).
const LOGIN_FAILED = "Not_Authorized";

// A failure while showing or refreshing a page: a lost login returns to the login form.
function failed(error) {
  if (error instanceof api.ApiError && error.status === 401 && error.body?.reason === LOGIN_FAILED) {
    api.forget();
    showLogin("Log in again");
  } else {
    say(error.message, "error");
  }
}

async function route() {
  if (!session.user) return;
  const where = location.hash.slice(1);
  const found = PAGES.map(([pattern, page, link]) => [where.match(pattern), page, link]).find(([match]) => match);
  const view = element("view");
  for (const link of element("nav").querySelectorAll("a")) {
    link.classList.toggle("current", Boolean(found) && link.getAttribute("href") === found[2]);
  }
  clearStatus();
  const shown = ++session.shown;
  if (!found) {
    session.current = null;
    replace(view, h("p", {}, "No such page."));
    return;
  }
  const [match, page] = found;
  const params = match.slice(1).map(decodeURIComponent);
  const container = h("div");
  replace(view, container);
  try {
    const shownPage = await page.show(container, params, { user: session.user });
    if (shown === session.shown) session.current = shownPage || null;
  } catch (error) {
    failed(error);
  }
}

function restartTimer() {
  clearInterval(session.timer);
  const seconds = Number(element("refresh").value);
  overview.sample().catch(failed);
  if (seconds > 0) session.timer = setInterval(tick, seconds * 1000);
}

async function tick() {
  if (session.busy || !session.user) return;
  session.busy = true;
  try {
    await overview.sample();
    if (session.current?.refresh) await session.current.refresh();
  } catch (error) {
    failed(error);
  } finally {
    session.busy = false;
  }
}

async function start() {
  element("login").addEventListener("submit", login);
  element("logout").addEventListener("click", () => {
    api.forget();
    showLogin();
  });
  element("refresh").addEventListener("change", restartTimer);
  window.addEventListener("hashchange", route);
  if (!api.hasCredentials()) {
    showLogin();
    return;
  }
  try {
    loggedIn(await api.get("/api/whoami"));
  } catch {
    api.forget();
    showLogin();
  }
}

start();
