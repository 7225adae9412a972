// elicitbot web inbox: answers without a page reload, live updates, a character counter.
// The page works without this script (plain form posts); it only makes it smoother.
"use strict";

(function () {
  const POLL_MS = 400;
  const live = document.getElementById("live");
  const flash = document.getElementById("flash");

  // A message's full-text link is /#<key>: show that one elicitation when it is not on the page.
  function follow() {
    const wanted = decodeURIComponent(location.hash.slice(1));
    if (live && wanted.includes(":") && !document.getElementById(wanted)) {
      location.replace("/?key=" + encodeURIComponent(wanted));
      return true;
    }
    return false;
  }
  if (follow()) return;
  window.addEventListener("hashchange", follow);

  function codePoints(text) {
    let n = 0;
    for (const _ of text) n += 1;
    return n;
  }

  function count(field) {
    const counter = field.closest(".textbox")?.querySelector(".counter");
    const max = Number(field.dataset.max || 0);
    if (!counter || !max) return;
    const n = codePoints(field.value.replace(/\r\n/g, "\n"));
    counter.textContent = n.toLocaleString("en") + " / " + max.toLocaleString("en");
    counter.classList.toggle("over", n > max);
  }

  document.addEventListener("input", (event) => {
    if (event.target.matches && event.target.matches("[data-max]")) count(event.target);
  });

  function say(card, kind, message) {
    const box = card.querySelector(".notice");
    if (!box) return;
    box.className = "notice " + kind;
    box.textContent = message;
  }

  function showFlash(kind, message) {
    if (!flash) return;
    flash.replaceChildren();
    const p = document.createElement("p");
    p.className = "notice flash " + kind;
    p.setAttribute("role", "status");
    p.textContent = message;
    flash.append(p);
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.matches("form.answer") || !window.fetch) return;
    event.preventDefault();
    const card = form.closest("[data-key]");
    const data = new FormData(form);
    const submitter = event.submitter;
    if (submitter && submitter.name) data.append(submitter.name, submitter.value);
    const buttons = [...form.querySelectorAll("button")].filter((b) => !b.disabled);
    buttons.forEach((b) => { b.disabled = true; });
    card.classList.add("busy");
    try {
      const response = await fetch(form.action, {
        method: "POST",
        headers: { Accept: "application/json" },
        body: new URLSearchParams(data),
        credentials: "same-origin",
      });
      let body = null;
      try { body = await response.json(); } catch (_) { body = null; }
      if (body && body.ok) {
        showFlash("done", body.message);
        say(card, "done", body.message);
        refresh().catch(() => {});  // the next poll catches up if this fails
        return;
      }
      say(card, "refused", (body && body.message) || "The answer was not accepted (" + response.status + ").");
    } catch (_) {
      say(card, "error", "Could not reach elicitbot: check the connection and try again.");
    } finally {
      card.classList.remove("busy");
      buttons.forEach((b) => { if (b.isConnected) b.disabled = false; });
    }
  });

  // ---- live updates: poll a fingerprint, fetch the live part when it changes, keep what is typed

  let busy = false;
  let failures = 0;

  function drafts() {
    const found = new Map();
    for (const field of live.querySelectorAll("[data-key] textarea")) {
      if (field.value) found.set(field.closest("[data-key]").dataset.key, field.value);
    }
    return found;
  }

  async function refresh() {
    const response = await fetch("/inbox/live?" + live.dataset.query, { credentials: "same-origin" });
    if (!response.ok) throw new Error("live " + response.status);
    const template = document.createElement("template");
    template.innerHTML = await response.text();
    const focused = document.activeElement;
    const selection = focused && "selectionStart" in focused
      ? [focused.selectionStart, focused.selectionEnd] : null;
    const typed = drafts();
    for (const fresh of template.content.querySelectorAll("[data-key]")) {
      const old = live.querySelector('[data-key="' + CSS.escape(fresh.dataset.key) + '"]');
      if (old && old.tagName === fresh.tagName && old.dataset.version === fresh.dataset.version
          && old.dataset.status === fresh.dataset.status) {
        fresh.replaceWith(old);  // unchanged: keep it as it is, typed text and notices included
      } else {
        const field = fresh.querySelector("textarea");
        const draft = typed.get(fresh.dataset.key);
        if (field && draft && !field.value) field.value = draft;
      }
    }
    live.replaceChildren(...template.content.childNodes);
    live.dataset.version = response.headers.get("X-Inbox-Version") || live.dataset.version;
    for (const field of live.querySelectorAll("[data-max]")) if (field.value) count(field);
    if (focused && focused.isConnected && focused !== document.activeElement) {
      focused.focus();
      if (selection) focused.setSelectionRange(selection[0], selection[1]);
    }
  }

  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch("/inbox/version", { credentials: "same-origin" });
      if (!response.ok) throw new Error("version " + response.status);
      const { version } = await response.json();
      if (version !== live.dataset.version) await refresh();
      failures = 0;
    } catch (_) {
      failures += 1;
    } finally {
      busy = false;
    }
  }

  if (live) {
    const tick = () => {
      const wait = failures ? Math.min(10000, POLL_MS * 2 ** failures) : POLL_MS;
      setTimeout(() => { poll().finally(tick); }, wait);
    };
    tick();
    document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
  }
})();
