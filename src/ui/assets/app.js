// rewind ui: the page's script. The server renders every piece of HTML; this puts the pieces
// in place, follows the live event stream, and handles dialogs and the keyboard.
"use strict";
(() => {
  const $ = (s, el = document) => el.querySelector(s);
  const $$ = (s, el = document) => Array.from(el.querySelectorAll(s));
  const csrf = $('meta[name="rewind-csrf"]').content;
  const detail = $("#detail");
  const dialog = $("#dialog");
  let current = null; // the diff shown: its query string
  let view = localStorage.getItem("rewind-view") || "unified";

  function toast(text, bad) {
    const t = $("#toast");
    t.textContent = text;
    t.className = bad ? "show bad" : "show";
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (t.className = ""), bad ? 8000 : 3000);
  }

  async function get(url) {
    const r = await fetch(url, { credentials: "same-origin" });
    const text = await r.text();
    if (!r.ok) throw new Error(text.replace(/<[^>]*>/g, "").trim());
    return text;
  }

  async function post(url, data) {
    const r = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "x-rewind-csrf": csrf, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(data),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(text.replace(/<[^>]*>/g, "").trim());
    return text;
  }

  // ---- timeline ----
  function filters() {
    const p = new URLSearchParams();
    // A path is taken exactly (a file may be named "x "); the other filters are trimmed.
    for (const el of $$("#filters input")) {
      if (el.value.trim()) p.set(el.name, el.name === "path" ? el.value : el.value.trim());
    }
    return p;
  }

  async function fillStats(root = document) {
    const spans = $$("span[data-stat]:not(.done)", root);
    for (let i = 0; i < spans.length; i += 50) {
      const chunk = spans.slice(i, i + 50);
      chunk.forEach((s) => s.classList.add("done"));
      try {
        const ids = chunk.map((s) => s.dataset.stat).join(",");
        const stats = JSON.parse(await get("/frag/stats?ids=" + ids));
        for (const s of chunk) s.innerHTML = stats[s.dataset.stat] || "";
      } catch (e) { /* stats are a nicety */ }
    }
  }

  async function reloadTimeline() {
    const list = $("#changes");
    try {
      list.innerHTML = await get("/frag/changes?" + filters());
      const f = filters();
      f.delete("q");
      const note = [...filters().entries()].map(([k, v]) => `${k}: ${v}`).join(" · ");
      $("#tl-note").textContent = note;
      fillStats(list);
    } catch (e) { toast(e.message, true); }
  }

  async function more(li) {
    const p = filters();
    p.set("before", li.dataset.more);
    li.querySelector("button").disabled = true;
    try {
      const html = await get("/frag/changes?" + p);
      li.insertAdjacentHTML("afterend", html);
      const parent = li.parentElement;
      li.remove();
      fillStats(parent);
    } catch (e) { toast(e.message, true); }
  }

  // Live: each change recorded in the mount comes on the event stream; the rows are asked for.
  let liveTimer = null;
  let sidebarTimer = null;
  async function liveRows() {
    const top = $("#changes li.change");
    const p = filters();
    if (top) p.set("after", top.dataset.id);
    try {
      const html = await get("/frag/changes?" + p);
      if (!html.trim()) return;
      const list = $("#changes");
      const tmp = document.createElement("ul");
      tmp.innerHTML = html;
      $$("li.more", tmp).forEach((m) => m.remove());
      const known = new Set($$("li.change", list).map((l) => l.dataset.id));
      const fresh = $$("li.change", tmp).filter((l) => !known.has(l.dataset.id));
      for (const l of fresh.reverse()) {
        l.classList.add("fresh");
        list.prepend(l);
      }
      fillStats(list);
    } catch (e) { /* the next event tries again */ }
  }
  async function reloadSidebar() {
    try {
      const sb = $("#sidebar");
      const scroll = sb.scrollTop;
      // Keep what is selected there selected.
      const sel = $("#sidebar li.selected");
      const keep = sel && ["turn", "session", "agent"].find((k) => sel.dataset[k] !== undefined && sel.matches("." + k));
      const value = keep && sel.dataset[keep];
      const html = await get("/frag/sidebar");
      sb.innerHTML = html;
      sb.scrollTop = scroll;
      if (keep) {
        const again = $$(`#sidebar li.${keep}`).find((l) => l.dataset[keep] === value);
        if (again) again.classList.add("selected");
      }
      loadFiles();
    } catch (e) { /* later */ }
  }
  if (document.body.dataset.mounted === "true" && window.EventSource) {
    const es = new EventSource("/events");
    es.addEventListener("change", () => {
      clearTimeout(liveTimer);
      liveTimer = setTimeout(liveRows, 150);
      clearTimeout(sidebarTimer);
      sidebarTimer = setTimeout(reloadSidebar, 1500);
    });
    es.onerror = () => $("#live") && $("#live").classList.add("off");
    es.onopen = () => $("#live") && $("#live").classList.remove("off");
  }

  async function loadFiles() {
    const el = $("#files");
    if (!el) return;
    try { el.innerHTML = await get("/frag/files"); } catch (e) { el.textContent = e.message; }
  }

  // ---- details ----
  function highlight(root) {
    if (!window.hljs) return;
    let budget = 6000;
    for (const f of $$(".file[data-lang]", root)) {
      const lang = f.dataset.lang;
      if (!lang || !hljs.getLanguage(lang)) continue;
      for (const s of $$("span.src", f)) {
        if (budget-- <= 0) return;
        s.innerHTML = hljs.highlight(s.textContent, { language: lang, ignoreIllegals: true }).value;
      }
    }
  }

  async function show(url) {
    detail.classList.add("loading");
    try {
      detail.innerHTML = await get(url);
      detail.scrollTop = 0;
      highlight(detail);
    } catch (e) {
      detail.innerHTML = "";
      const d = document.createElement("div");
      d.className = "error";
      d.textContent = e.message;
      detail.append(d);
    } finally {
      detail.classList.remove("loading");
    }
  }

  function showDiff(query) {
    current = query;
    const p = new URLSearchParams(query);
    if (view === "split") p.set("view", "split");
    return show("/frag/diff?" + p);
  }

  function select(el) {
    $$(".selected").forEach((s) => s.classList.remove("selected"));
    if (el) {
      el.classList.add("selected");
      el.scrollIntoView({ block: "nearest" });
    }
  }

  // ---- dialogs ----
  function openDialog(html) {
    $("#dialog-body").innerHTML = html;
    if (!dialog.open) dialog.showModal();
  }

  async function plan(what, value, force, extra) {
    openDialog('<div class="plan-box"><p class="muted">Planning…</p></div>');
    try {
      openDialog(await post("/act/plan", { what, value, force: force ? "1" : "", ...(extra || {}) }));
      const c = $("#confirm");
      if (c) c.focus();
    } catch (e) {
      openDialog('<div class="plan-box"><div class="error"></div><div class="buttons"><button class="ghost" id="cancel">Close</button></div></div>');
      $("#dialog-body .error").textContent = e.message;
    }
  }

  async function confirmRollback(btn) {
    btn.disabled = true;
    btn.textContent = "Rolling back…";
    try {
      openDialog(await post("/act/rollback", {
        what: btn.dataset.what, value: btn.dataset.value, force: btn.dataset.force,
        ...Object.fromEntries(["of", "ofv", "path", "planned"].filter((k) => btn.dataset[k] !== undefined).map((k) => [k, btn.dataset[k]])),
      }));
      if (!$("#dialog-body .plan-box.done")) {
        // The plan changed since it was shown: nothing ran; the new plan is shown instead.
        const c = $("#confirm");
        if (c) c.focus();
        return;
      }
      toast("Rolled back");
      liveRows();
      if (current) showDiff(current);
    } catch (e) {
      toast(e.message, true);
      dialog.close();
    }
  }

  // ---- clicks ----
  document.addEventListener("click", (ev) => {
    const t = ev.target;
    const el = (s) => t.closest(s);
    let x;
    if ((x = el("[data-plan]"))) {
      ev.preventDefault();
      const extra = {};
      for (const k of ["of", "ofv", "path"]) if (x.dataset[k] !== undefined) extra[k] = x.dataset[k];
      plan(x.dataset.plan, x.dataset.value, x.dataset.force === "1", extra);
    } else if ((x = el("#confirm"))) {
      confirmRollback(x);
    } else if (el("#cancel")) {
      dialog.close();
    } else if ((x = el("li.more"))) {
      more(x);
    } else if ((x = el("li.change"))) {
      select(x);
      showDiff("id=" + x.dataset.id);
    } else if ((x = el("li.turn"))) {
      select(x);
      showDiff("turn=" + encodeURIComponent(x.dataset.turn));
      setFilter({ turn: x.dataset.turn });
    } else if ((x = el("li.session"))) {
      select(x);
      showDiff("session=" + encodeURIComponent(x.dataset.session));
      setFilter({ session: x.dataset.session });
    } else if ((x = el("li.agent"))) {
      select(x);
      showDiff("agent=" + encodeURIComponent(x.dataset.agent));
      setFilter({ agent: x.dataset.agent });
    } else if ((x = el("li.fpath"))) {
      select(x);
      setFilter({ path: x.dataset.path });
    } else if ((x = el("[data-view]"))) {
      view = x.dataset.view;
      localStorage.setItem("rewind-view", view);
      if (current) showDiff(current);
    } else if ((x = el("[data-whole]"))) {
      const p = new URLSearchParams({ path: x.dataset.whole });
      if (x.dataset.at) p.set("at", x.dataset.at);
      show("/frag/file?" + p);
    } else if ((x = el("[data-tree-at]"))) {
      show("/frag/tree?" + new URLSearchParams({ at: x.dataset.treeAt, dir: x.dataset.dir || "" }));
    } else if ((x = el("[data-comment]"))) {
      const text = prompt(`Comment on hunk ${x.dataset.comment} of ${x.dataset.path} (the agent reads it):`);
      if (text && text.trim()) post("/act/comment", {
        of: x.dataset.of, ofv: x.dataset.ofv, path: x.dataset.path, hunk: x.dataset.comment, text,
      }).then((html) => { const d = document.createElement("div"); d.innerHTML = html; toast(d.textContent.trim()); },
        (e) => toast(e.message, true));
    } else if ((x = el("[data-diff-from]"))) {
      showDiff("from=" + encodeURIComponent(x.dataset.diffFrom));
    } else if (el("#t-diff") || el("#t-back")) {
      const at = $("#travel input").value.trim();
      if (!at) toast("Say which point: a change id, a checkpoint, 10m, a time", true);
      else if (el("#t-diff")) showDiff("from=" + encodeURIComponent(at));
      else plan("to", at, false);
    } else if (el("#clear")) {
      for (const i of $$("#filters input")) i.value = "";
      reloadTimeline();
    } else if (el("#checkpoint")) {
      const name = prompt("Name the checkpoint (e.g. before-refactor):");
      if (name) post("/act/checkpoint", { name }).then(
        (html) => { const d = document.createElement("div"); d.innerHTML = html; toast(d.textContent.trim()); },
        (e) => toast(e.message, true));
    } else if (el("#comments")) {
      current = null;
      show("/frag/comments");
    } else if (el("#help")) {
      help();
    }
  });

  function setFilter(f) {
    for (const i of $$("#filters input")) i.value = "";
    for (const [k, v] of Object.entries(f)) $(`#filters input[name="${k}"]`).value = v;
    reloadTimeline();
  }

  // The slider picks a change id; letting go shows the tree then.
  document.addEventListener("input", (ev) => {
    if (ev.target.id === "slider") {
      $("#slider-at").textContent = "#" + ev.target.value;
      $("#travel input").value = ev.target.value;
    }
  });
  document.addEventListener("change", (ev) => {
    if (ev.target.id === "slider")
      show("/frag/tree?" + new URLSearchParams({ at: ev.target.value, dir: "" }));
  });

  $("#filters").addEventListener("submit", (ev) => { ev.preventDefault(); reloadTimeline(); });
  document.addEventListener("submit", (ev) => {
    if (ev.target.id === "travel") {
      ev.preventDefault();
      const at = ev.target.at.value.trim();
      if (at) show("/frag/tree?" + new URLSearchParams({ at, dir: "" }));
    }
  });

  function help() {
    openDialog(`<div class="plan-box"><h2>Keyboard</h2><table class="keys">
      <tr><td><kbd>↓</kbd> <kbd>↑</kbd></td><td>next / previous change in the timeline</td></tr>
      <tr><td><kbd>j</kbd> <kbd>k</kbd></td><td>next / previous hunk</td></tr>
      <tr><td><kbd>n</kbd> <kbd>p</kbd></td><td>next / previous file</td></tr>
      <tr><td><kbd>]</kbd> <kbd>[</kbd></td><td>next / previous turn</td></tr>
      <tr><td><kbd>u</kbd></td><td>unified / side by side</td></tr>
      <tr><td><kbd>r</kbd></td><td>roll back what is shown (plan first)</td></tr>
      <tr><td><kbd>/</kbd></td><td>search</td></tr>
      <tr><td><kbd>Esc</kbd></td><td>close</td></tr></table>
      <div class="buttons"><button class="ghost" id="cancel">Close</button></div></div>`);
  }

  // ---- keyboard ----
  function step(items, dir, scroller) {
    if (!items.length) return null;
    const top = scroller.getBoundingClientRect().top;
    let i = items.findIndex((e) => e.getBoundingClientRect().top > top + 4);
    if (i < 0) i = items.length;
    const target = dir > 0 ? items[i] : items[Math.max(0, i - 2)];
    if (target) target.scrollIntoView({ block: "start" });
    return target;
  }
  function stepList(sel, dir) {
    const items = $$(sel);
    if (!items.length) return;
    const at = items.findIndex((e) => e.classList.contains("selected"));
    const next = items[Math.min(items.length - 1, Math.max(0, at < 0 ? 0 : at + dir))];
    next.click();
  }
  document.addEventListener("keydown", (ev) => {
    if ((ev.target.matches && ev.target.matches("input, textarea")) || ev.ctrlKey || ev.metaKey || ev.altKey) {
      if (ev.key === "Escape") ev.target.blur();
      return;
    }
    if (dialog.open) return;
    const k = ev.key;
    if (k === "j") step($$("#detail tbody.hunk"), 1, detail);
    else if (k === "k") step($$("#detail tbody.hunk"), -1, detail);
    else if (k === "n") step($$("#detail .file"), 1, detail);
    else if (k === "p") step($$("#detail .file"), -1, detail);
    else if (k === "]") stepList("li.turn", 1);
    else if (k === "[") stepList("li.turn", -1);
    else if (k === "ArrowDown" || k === "J") stepList("li.change", 1);
    else if (k === "ArrowUp" || k === "K") stepList("li.change", -1);
    else if (k === "u") { view = view === "split" ? "unified" : "split"; localStorage.setItem("rewind-view", view); if (current) showDiff(current); }
    else if (k === "r") { const b = $("#detail .detail-head [data-plan]"); if (b) b.click(); }
    else if (k === "/") $('#filters input[name="q"]').focus();
    else if (k === "?") help();
    else return;
    ev.preventDefault();
  });

  fillStats();
  loadFiles();
})();
