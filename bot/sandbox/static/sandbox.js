// The sandbox page: renders the Slack stand-in's state (Block Kit, mrkdwn) and turns clicks
// into posts to the sandbox API, which signs them and sends them to the bot's /slack/events.
//
// Everything shown comes from agents or the bot and is untrusted: it only ever reaches the
// page as text nodes (textContent) or as the href of a link whose URL parsed as http(s).
// Nothing here writes HTML from a string.
"use strict";

(() => {
  const EMOJI = {
    white_check_mark: "\u2705",
    heavy_check_mark: "\u2714\ufe0f",
    x: "\u274c",
    hourglass: "\u231b",
    hourglass_flowing_sand: "\u23f3",
    no_entry_sign: "\ud83d\udeab",
    no_entry: "\u26d4",
    bell: "\ud83d\udd14",
    rotating_light: "\ud83d\udea8",
    ballot_box_with_check: "\u2611\ufe0f",
    warning: "\u26a0\ufe0f",
    speech_balloon: "\ud83d\udcac",
    scissors: "\u2702\ufe0f",
    lock: "\ud83d\udd12",
    robot_face: "\ud83e\udd16",
  };

  const ui = {
    state: null,
    acting: sessionStorage.getItem("countersign.acting") || "",
    place: { kind: "channel", id: null },
    homeAskedFor: "",
    modal: null, // the trigger id of the modal shown
    modalErrors: {},
    peopleKey: "",
  };

  // -- small DOM helpers (text only) -----------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function decode(text) {
    // Slack's three entities; everything else is literal
    return String(text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  function withEmoji(text, parent) {
    const re = /:([a-z0-9_+-]+):/g;
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      const glyph = Object.prototype.hasOwnProperty.call(EMOJI, m[1]) ? EMOJI[m[1]] : null;
      if (glyph === null) continue;
      parent.append(document.createTextNode(text.slice(last, m.index) + glyph));
      last = re.lastIndex;
    }
    parent.append(document.createTextNode(text.slice(last)));
  }

  // -- mrkdwn --------------------------------------------------------------------------

  const INLINE = new RegExp(
    [
      "<([^<>\\n]+)>",
      "(?<![A-Za-z0-9`])`([^`\\n]+)`(?![A-Za-z0-9`])",
      "(?<![A-Za-z0-9*])\\*(?=\\S)([^*\\n]*?\\S)\\*(?![A-Za-z0-9*])",
      "(?<![A-Za-z0-9_])_(?=\\S)([^_\\n]*?\\S)_(?![A-Za-z0-9_])",
      "(?<![A-Za-z0-9~])~(?=\\S)([^~\\n]*?\\S)~(?![A-Za-z0-9~])",
    ].join("|"),
    "g",
  );

  function mrkdwn(text, parent) {
    // code blocks first: nothing inside them is formatting; the line breaks next to a fence
    // belong to the fence
    const fence = /```([\s\S]*?)```/g;
    let last = 0;
    let afterFence = false;
    let m;
    while ((m = fence.exec(text)) !== null) {
      let before = text.slice(last, m.index);
      if (afterFence) before = before.replace(/^\n/, "");
      inline(before.replace(/\n$/, ""), parent);
      const pre = el("pre", "code-block");
      pre.textContent = decode(m[1].replace(/^\n/, "").replace(/\n$/, ""));
      parent.append(pre);
      last = fence.lastIndex;
      afterFence = true;
    }
    let rest = text.slice(last);
    if (afterFence) rest = rest.replace(/^\n/, "");
    inline(rest, parent);
  }

  function inline(text, parent) {
    const re = new RegExp(INLINE.source, "g");
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      withEmoji(decode(text.slice(last, m.index)), parent);
      if (m[1] !== undefined) {
        special(m[1], parent);
      } else if (m[2] !== undefined) {
        parent.append(el("code", "inline-code", decode(m[2])));
      } else {
        const tag = m[3] !== undefined ? "strong" : m[4] !== undefined ? "em" : "s";
        const span = el(tag);
        inline(m[3] ?? m[4] ?? m[5], span);
        parent.append(span);
      }
      last = re.lastIndex;
    }
    withEmoji(decode(text.slice(last)), parent);
  }

  function special(inner, parent) {
    const bar = inner.indexOf("|");
    const target = bar < 0 ? inner : inner.slice(0, bar);
    const label = bar < 0 ? null : decode(inner.slice(bar + 1));
    const users = (ui.state && ui.state.users) || {};
    if (target.startsWith("@")) {
      const id = target.slice(1);
      const name = Object.prototype.hasOwnProperty.call(users, id) ? users[id] : id;
      parent.append(el("span", "mention", "@" + name));
    } else if (target.startsWith("#")) {
      parent.append(el("span", "mention", "#" + (label || target.slice(1).toLowerCase())));
    } else if (target.startsWith("!subteam^")) {
      const group = target.slice("!subteam^".length);
      parent.append(el("span", "mention", "@" + (label ? label.replace(/^@/, "") : group.toLowerCase())));
    } else if (target.startsWith("!date^")) {
      parent.append(el("time", "date", slackDate(target, label)));
    } else if (target === "!here" || target === "!channel" || target === "!everyone") {
      parent.append(el("span", "mention broadcast", "@" + target.slice(1)));
    } else if (target.startsWith("!")) {
      parent.append(document.createTextNode(label || target.slice(1)));
    } else {
      link(decode(target), label, parent);
    }
  }

  function link(url, label, parent) {
    let parsed = null;
    try {
      parsed = new URL(url);
    } catch (_) {
      parsed = null;
    }
    if (parsed && (parsed.protocol === "http:" || parsed.protocol === "https:")) {
      const a = el("a", "link", label || url);
      a.href = parsed.href;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      parent.append(a);
    } else {
      parent.append(document.createTextNode(label || url));
    }
  }

  function slackDate(target, fallback) {
    // <!date^1700000000^{date_short_pretty} {time}|fallback>
    const parts = target.split("^");
    const seconds = Number(parts[1]);
    if (!Number.isFinite(seconds)) return fallback || "";
    const at = new Date(seconds * 1000);
    const format = parts.slice(2).join("^") || "{date_short_pretty} {time}";
    return format.replace(/\{([a-z_]+)\}/g, (_, token) => {
      if (token === "time") return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      if (token === "time_secs") return at.toLocaleTimeString();
      if (token.startsWith("date")) {
        return at.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
      }
      return at.toLocaleString();
    });
  }

  // -- Block Kit -----------------------------------------------------------------------

  function textObject(obj, className) {
    const node = el("div", className || "text");
    if (!obj || typeof obj.text !== "string") return node;
    if (obj.type === "mrkdwn") mrkdwn(obj.text, node);
    else if (obj.emoji === false) node.textContent = obj.text;
    else withEmoji(obj.text, node);
    return node;
  }

  function button(element, onButton) {
    const b = el("button", "button " + (element.style || "default"));
    b.type = "button";
    b.textContent = (element.text && element.text.text) || element.action_id || "button";
    if (element.url) {
      b.title = "opens a link in Slack (not followed here)";
    }
    b.addEventListener("click", () => onButton(element));
    return b;
  }

  function richText(element, parent) {
    for (const child of element.elements || []) {
      if (child.type === "rich_text_preformatted") {
        const pre = el("pre", "code-block");
        richInline(child.elements || [], pre);
        parent.append(pre);
      } else if (child.type === "rich_text_quote") {
        const q = el("blockquote", "quote");
        richInline(child.elements || [], q);
        parent.append(q);
      } else if (child.type === "rich_text_list") {
        const list = el(child.style === "ordered" ? "ol" : "ul", "list");
        for (const item of child.elements || []) {
          const li = el("li");
          richInline(item.elements || [], li);
          list.append(li);
        }
        parent.append(list);
      } else {
        const p = el("div", "text");
        richInline(child.elements || [], p);
        parent.append(p);
      }
    }
  }

  function richInline(elements, parent) {
    const users = (ui.state && ui.state.users) || {};
    for (const item of elements) {
      let node;
      if (item.type === "text") {
        node = el("span", null, item.text || "");
        const style = item.style || {};
        if (style.bold) node = wrap("strong", node);
        if (style.italic) node = wrap("em", node);
        if (style.strike) node = wrap("s", node);
        if (style.code) node = wrap("code", node);
      } else if (item.type === "link") {
        const holder = el("span");
        link(String(item.url || ""), item.text || null, holder);
        node = holder;
      } else if (item.type === "user") {
        const id = String(item.user_id || "");
        node = el("span", "mention", "@" + (Object.prototype.hasOwnProperty.call(users, id) ? users[id] : id));
      } else if (item.type === "emoji") {
        node = el("span", null, EMOJI[item.name] || ":" + (item.name || "") + ":");
      } else {
        node = el("span", null, item.text || "");
      }
      parent.append(node);
    }
  }

  function wrap(tag, child) {
    const outer = el(tag);
    outer.append(child);
    return outer;
  }

  function renderBlocks(blocks, onButton) {
    const holder = el("div", "blocks");
    for (const block of Array.isArray(blocks) ? blocks : []) {
      holder.append(renderBlock(block, onButton));
    }
    return holder;
  }

  function renderBlock(block, onButton) {
    const kind = block && block.type;
    if (kind === "header") return textObject(block.text, "header");
    if (kind === "divider") return el("hr", "divider");
    if (kind === "section") {
      const node = el("div", "section");
      if (block.block_id) node.dataset.block = String(block.block_id);
      const body = el("div", "section-body");
      if (block.text) body.append(textObject(block.text));
      if (Array.isArray(block.fields)) {
        const fields = el("div", "fields");
        for (const f of block.fields) fields.append(textObject(f, "field"));
        body.append(fields);
      }
      node.append(body);
      if (block.accessory && block.accessory.type === "button") {
        node.append(button(block.accessory, (b) => onButton(b, block)));
      }
      return node;
    }
    if (kind === "context") {
      const node = el("div", "context");
      for (const e of block.elements || []) {
        if (e.type === "image") node.append(el("span", "image-alt", "[image: " + (e.alt_text || "") + "]"));
        else node.append(textObject(e, "context-item"));
      }
      return node;
    }
    if (kind === "actions") {
      const node = el("div", "actions");
      for (const e of block.elements || []) {
        if (e.type === "button") node.append(button(e, (b) => onButton(b, block)));
        else node.append(el("span", "unsupported", "[" + e.type + "]"));
      }
      return node;
    }
    if (kind === "rich_text") {
      const node = el("div", "rich-text");
      richText(block, node);
      return node;
    }
    if (kind === "image") return el("div", "image-alt", "[image: " + (block.alt_text || "") + "]");
    if (kind === "input") return renderInput(block);
    return el("div", "unsupported", "[unsupported block: " + kind + "]");
  }

  function renderInput(block) {
    const node = el("div", "input");
    node.dataset.block = String(block.block_id || "");
    const label = el("label", "input-label");
    label.append(textObject(block.label, "label-text"));
    if (block.optional) label.append(el("span", "optional", "(optional)"));
    node.append(label);
    const element = block.element || {};
    let control;
    if (element.type === "static_select") {
      control = el("select", "control");
      const none = el("option", null, (element.placeholder && element.placeholder.text) || "Choose…");
      none.value = "";
      control.append(none);
      for (const option of element.options || []) {
        const o = el("option", null, (option.text && option.text.text) || "");
        o.value = String(option.value || "");
        control.append(o);
      }
      if (element.initial_option) control.value = String(element.initial_option.value || "");
    } else if (element.type === "plain_text_input") {
      control = el(element.multiline ? "textarea" : "input", "control");
      if (element.max_length) control.maxLength = Number(element.max_length);
      if (element.initial_value !== undefined) control.value = String(element.initial_value);
    } else if (element.type === "number_input") {
      // Slack's number input sends its text; the bot reads it as a number
      control = el("input", "control");
      control.inputMode = element.is_decimal_allowed ? "decimal" : "numeric";
      if (element.initial_value !== undefined) control.value = String(element.initial_value);
    } else {
      control = el("span", "unsupported", "[" + element.type + "]");
    }
    control.dataset.action = String(element.action_id || "");
    node.append(control);
    const error = el("div", "input-error");
    error.dataset.errorFor = String(block.block_id || "");
    node.append(error);
    return node;
  }

  // -- the page ------------------------------------------------------------------------

  async function post(path, body) {
    const response = await fetch("api/" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) answer.error = answer.error || "HTTP " + response.status;
    return answer;
  }

  async function refresh() {
    const response = await fetch("api/state", { cache: "no-store" });
    if (!response.ok) return;
    ui.state = await response.json();
    render();
  }

  function person(id) {
    return ((ui.state && ui.state.people) || []).find((p) => p.id === id);
  }

  function renderPeople() {
    const people = ui.state.people;
    const key = JSON.stringify(people);
    if (!person(ui.acting) && people.length) ui.acting = people[0].id;
    if (key === ui.peopleKey) return;
    ui.peopleKey = key;
    const select = document.getElementById("acting");
    select.replaceChildren();
    for (const p of people) {
      const roles = p.roles.length ? p.roles.join(", ") : "no role";
      const note = p.note ? " · " + p.note : "";
      const option = el("option", null, p.real_name + " (@" + p.name + ") — " + roles + note);
      option.value = p.id;
      select.append(option);
    }
    select.value = ui.acting;
  }

  function renderNav() {
    const nav = document.getElementById("nav");
    nav.replaceChildren();
    nav.append(el("h2", null, "Channels"));
    for (const channel of ui.state.channels) {
      nav.append(navItem("# " + channel.name, { kind: "channel", id: channel.id }, channel.id));
    }
    nav.append(el("h2", null, "Apps"));
    nav.append(navItem("Countersign · App Home", { kind: "home" }, "home"));
  }

  function navItem(label, place, key) {
    const item = el("button", "nav-item", label);
    item.type = "button";
    item.dataset.place = key;
    const here = ui.place.kind === place.kind && (place.kind === "home" || ui.place.id === place.id);
    if (here) item.classList.add("here");
    item.addEventListener("click", () => {
      ui.place = place;
      render();
    });
    return item;
  }

  function renderMain() {
    const main = document.getElementById("main");
    main.replaceChildren();
    if (ui.place.kind === "home") {
      renderHome(main);
      return;
    }
    const channel = ui.state.channels.find((c) => c.id === ui.place.id) || ui.state.channels[0];
    if (!channel) return;
    ui.place = { kind: "channel", id: channel.id };
    main.append(el("h1", "channel-name", "# " + channel.name));
    if (!channel.messages.length) {
      main.append(el("p", "empty", "Nothing posted here yet. Submit an approval (see the curl the bot printed)."));
    }
    for (const message of channel.messages) main.append(renderMessage(channel, message));
    const mine = ui.state.ephemerals.filter((e) => e.user === ui.acting && e.channel === channel.id);
    for (const e of mine) {
      const node = el("div", "message ephemeral");
      node.dataset.testid = "ephemeral";
      node.append(el("div", "only-you", "Only visible to you"));
      node.append(messageBody(e, channel, null));
      main.append(node);
    }
  }

  function renderMessage(channel, message) {
    const node = el("article", "message");
    node.dataset.testid = "message";
    node.dataset.ts = message.ts;
    const head = el("div", "message-head");
    head.append(el("span", "author", "Countersign"), el("span", "app-tag", "APP"));
    if (message.edited) head.append(el("span", "edited", "(edited)"));
    node.append(head);
    node.append(messageBody(message, channel, message.ts));
    if (message.replies.length) {
      const thread = el("div", "thread");
      thread.append(el("div", "thread-count", message.replies.length + (message.replies.length === 1 ? " reply" : " replies")));
      for (const reply of message.replies) {
        const r = el("div", "message reply");
        r.dataset.testid = "reply";
        r.dataset.ts = reply.ts;
        r.append(messageBody(reply, channel, reply.ts));
        thread.append(r);
      }
      node.append(thread);
    }
    return node;
  }

  function messageBody(message, channel, ts) {
    if (Array.isArray(message.blocks) && message.blocks.length) {
      return renderBlocks(message.blocks, (b) => clickButton(b, { channel: channel.id, ts }));
    }
    const text = el("div", "text");
    mrkdwn(String(message.text || ""), text);
    return text;
  }

  function renderHome(main) {
    main.append(el("h1", "channel-name", "Countersign · Home"));
    if (ui.homeAskedFor !== ui.acting) {
      ui.homeAskedFor = ui.acting;
      post("home", { user: ui.acting });
    }
    const view = ui.state.home[ui.acting];
    if (!view) {
      main.append(el("p", "empty", "Opening the App Home…"));
      return;
    }
    const home = el("section", "home");
    home.dataset.testid = "home";
    home.append(renderBlocks(view.blocks, (b) => clickButton(b, { surface: "home" })));
    main.append(home);
  }

  async function clickButton(element, where) {
    if (!element.value || !element.action_id) return;
    const answer = await post("click", {
      user: ui.acting,
      action_id: element.action_id,
      value: element.value,
      ...where,
    });
    if (answer.error) note("Not sent: " + answer.error);
    refresh();
  }

  function note(text) {
    const live = document.getElementById("live");
    live.textContent = text;
  }

  function renderLog() {
    const list = document.getElementById("log");
    list.replaceChildren();
    for (const entry of ui.state.log.slice().reverse()) {
      const who = person(entry.user);
      const item = el("li", "log-item");
      item.append(el("span", "log-who", who ? who.real_name : entry.user));
      item.append(document.createTextNode(" " + entry.what + " "));
      item.append(el("span", "log-kind", entry.kind + " → " + entry.status));
      list.append(item);
    }
  }

  function renderModal() {
    const backdrop = document.getElementById("modal");
    const open = ui.state.modals.filter((m) => m.open && m.user === ui.acting);
    const modal = open.length ? open[open.length - 1] : null;
    if (!modal) {
      ui.modal = null;
      backdrop.hidden = true;
      backdrop.replaceChildren();
      return;
    }
    if (ui.modal !== modal.trigger_id) {
      ui.modal = modal.trigger_id;
      ui.modalErrors = {};
      backdrop.replaceChildren(buildModal(modal));
    }
    for (const slot of backdrop.querySelectorAll(".input-error")) {
      slot.textContent = ui.modalErrors[slot.dataset.errorFor] || "";
    }
    backdrop.hidden = false;
  }

  function buildModal(modal) {
    const view = modal.view || {};
    const box = el("div", "modal");
    box.dataset.testid = "modal";
    box.setAttribute("role", "dialog");
    box.append(textObject(view.title, "modal-title"));
    const form = el("div", "modal-body");
    form.append(renderBlocks(view.blocks, () => {}));
    box.append(form);
    const foot = el("div", "modal-foot");
    const cancel = el("button", "button default", (view.close && view.close.text) || "Cancel");
    cancel.type = "button";
    cancel.addEventListener("click", async () => {
      await post("submit", { user: ui.acting, trigger_id: modal.trigger_id, cancel: true });
      refresh();
    });
    const submit = el("button", "button primary", (view.submit && view.submit.text) || "Submit");
    submit.type = "button";
    submit.dataset.testid = "modal-submit";
    submit.addEventListener("click", async () => {
      const values = {};
      for (const input of form.querySelectorAll(".input")) {
        const control = input.querySelector(".control");
        if (!control) continue;
        values[input.dataset.block] = { [control.dataset.action]: control.value };
      }
      const answer = await post("submit", { user: ui.acting, trigger_id: modal.trigger_id, values });
      ui.modalErrors = answer.errors || {};
      if (answer.error) note("Not sent: " + answer.error);
      refresh();
    });
    foot.append(cancel, submit);
    box.append(foot);
    return box;
  }

  function render() {
    if (!ui.state) return;
    renderPeople();
    renderNav();
    renderMain();
    renderLog();
    renderModal();
  }

  function listen() {
    const source = new EventSource("api/events");
    source.addEventListener("open", () => note("live"));
    source.addEventListener("change", () => {
      note("live");
      refresh();
    });
    source.addEventListener("error", () => note("reconnecting…"));
  }

  document.getElementById("acting").addEventListener("change", (event) => {
    ui.acting = event.target.value;
    sessionStorage.setItem("countersign.acting", ui.acting);
    ui.modal = null;
    render();
  });
  refresh().then(listen);
})();
