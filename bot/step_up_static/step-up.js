// The step-up page: shows what is being approved (as text only) and runs the passkey ceremony.
// The server checks everything; this script only carries the browser's answers to it.
"use strict";

(function () {
  const token = location.pathname.split("/")[2];
  const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  const base = "/step-up/" + encodeURIComponent(token) + "/";
  const $ = (id) => document.getElementById(id);

  function say(text, kind) {
    const result = $("result");
    result.textContent = text;
    result.className = kind;
  }

  async function post(path, body) {
    const response = await fetch(base + path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
    });
    let answer = {};
    try { answer = await response.json(); } catch (e) { answer = {}; }
    if (!response.ok) { throw new Error(answer.error || ("HTTP " + response.status)); }
    return answer;
  }

  function show(facts) {
    $("tool").textContent = facts.tool;
    $("requester").textContent = facts.requester;
    $("agent").textContent = facts.agent;
    $("summary").textContent = facts.summary;
    $("decision").textContent = facts.decision === "approve" ? "Approve" : facts.decision;
    let shown = facts.arguments;
    try { shown = JSON.stringify(JSON.parse(facts.arguments), null, 2); } catch (e) { /* as is */ }
    $("arguments").textContent = shown;
    $("sha").textContent = facts.arguments_sha256;
    $("approval").textContent = facts.approval_id;
    if (facts.edit) {
      $("edit").hidden = false;
      $("edit-by").textContent = facts.edit.by;
      $("edit-changed").textContent = facts.edit.changed.join(", ");
      $("edit-note").textContent = facts.edit.note;
    }
    $("register-note").hidden = facts.has_passkey;
  }

  async function confirmWithPasskey() {
    $("act").disabled = true;
    say("Waiting for your passkey…", "");
    try {
      let options = await post("options", {});
      if (options.mode === "register") {
        const created = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options.publicKey),
        });
        await post("register", { credential: created.toJSON() });
        options = await post("options", {});
      }
      const assertion = await navigator.credentials.get({
        publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options.publicKey),
      });
      const done = await post("confirm", { credential: assertion.toJSON() });
      say(done.message + " You can close this page.", "ok");
    } catch (error) {
      say("Not confirmed: " + error.message, "error");
      $("act").disabled = false;
    }
  }

  async function start() {
    if (!window.PublicKeyCredential || !PublicKeyCredential.parseRequestOptionsFromJSON) {
      say("This browser cannot use passkeys here: open the link in a current browser.", "error");
      return;
    }
    const response = await fetch(base + "facts", { credentials: "same-origin" });
    const facts = await response.json();
    if (!response.ok) { say(facts.error || "This link cannot be used.", "error"); return; }
    show(facts);
    $("act").disabled = false;
    $("act").addEventListener("click", confirmWithPasskey);
  }

  start().catch((error) => say("The page could not load: " + error.message, "error"));
})();
