// The run page's live events. It reads the run's event stream (/runs/{id}/live, the SSE
// stream the daemon's API serves, authenticated by the session cookie) with fetch, appends
// each event to the list as text (textContent only: nothing from a run is ever parsed as
// HTML), shows the answer's streamed text, and reloads the page when the run stops, so the
// panels it needs then (approve, answer, resume) appear.
(function () {
  "use strict";
  // The fields an event's line shows, in order (the server's list: render.rs EVENT_FIELDS).
  var FIELDS = ["name", "tool", "model", "question", "answer", "decision", "reason",
    "error", "goal", "state", "how"];
  var MAX_CHARS = 200;
  var list = document.getElementById("events");
  if (!list || list.dataset.live !== "1") {
    return;
  }
  var run = list.dataset.run;
  var after = list.dataset.after || "0";
  var shownState = list.dataset.state;
  var status = document.getElementById("live-status");
  var streaming = document.getElementById("streaming");
  var lastId = after;
  var retries = 0;
  // Events this page received: a stream that ends before any is no news worth a reload.
  var received = 0;

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function summary(event) {
    var parts = [];
    FIELDS.forEach(function (field) {
      var value = event[field];
      if (value === undefined || value === null || value === "") {
        return;
      }
      if (typeof value !== "string") {
        value = JSON.stringify(value);
      }
      parts.push(field + ": " + value);
    });
    var text = parts.join(", ");
    return text.length > MAX_CHARS ? text.slice(0, MAX_CHARS) + "\u2026" : text;
  }

  function append(id, name, data) {
    var event = {};
    try {
      event = JSON.parse(data);
    } catch (e) {
      event = {};
    }
    if (name === "agent.stream.delta") {
      if (streaming && event.kind === "text" && typeof event.text === "string") {
        streaming.hidden = false;
        streaming.textContent += event.text;
      }
      return;
    }
    var item = document.createElement("li");
    item.className = "live";
    if (id) {
      item.dataset.id = id;
    }
    var code = document.createElement("code");
    code.className = "event-name";
    code.textContent = name;
    var text = document.createElement("span");
    text.className = "event-text";
    text.textContent = summary(event);
    item.appendChild(code);
    item.appendChild(document.createTextNode(" "));
    item.appendChild(text);
    list.appendChild(item);
  }

  function ended(data) {
    var end = {};
    try {
      end = JSON.parse(data);
    } catch (e) {
      end = {};
    }
    say("The run is now " + (end.state || "stopped") + ": reload the page to see it.");
    if (end.state && end.state !== shownState) {
      // A stream that ends at once, with no event, is reloaded for only once per change of
      // state: a page that keeps disagreeing with its stream never reloads in a loop.
      var key = "keel.run-page:" + run + ":" + shownState + ">" + end.state;
      var again = false;
      try {
        again = window.sessionStorage.getItem(key) === "1";
        window.sessionStorage.setItem(key, "1");
      } catch (e) {
        again = true;
      }
      if (received > 0 || !again) {
        // A moment to see the last events before the page changes.
        window.setTimeout(function () {
          window.location.reload();
        }, 500);
      }
    }
  }

  // One SSE frame; true when it ends the stream.
  function frame(block) {
    var id = null;
    var name = "message";
    var data = [];
    block.split("\n").forEach(function (line) {
      if (line === "" || line.charAt(0) === ":") {
        return;
      }
      var colon = line.indexOf(":");
      var field = colon < 0 ? line : line.slice(0, colon);
      var value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.charAt(0) === " ") {
        value = value.slice(1);
      }
      if (field === "id") {
        id = value;
      } else if (field === "event") {
        name = value;
      } else if (field === "data") {
        data.push(value);
      }
    });
    if (data.length === 0) {
      return false;
    }
    if (id) {
      lastId = id;
    }
    if (name === "keel.stream.end") {
      ended(data.join("\n"));
      return true;
    }
    received += 1;
    append(id, name, data.join("\n"));
    return false;
  }

  function retry() {
    retries += 1;
    if (retries > 5) {
      say("Lost this run's live events: reload the page to see where it is.");
      return;
    }
    say("Reconnecting to this run's live events\u2026");
    window.setTimeout(follow, 1000 * retries);
  }

  function follow() {
    var url = "/runs/" + encodeURIComponent(run) + "/live?after=" + encodeURIComponent(after);
    var headers = { "Accept": "text/event-stream" };
    if (lastId !== after) {
      headers["Last-Event-ID"] = lastId;
    }
    fetch(url, { headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok || !response.body) {
          throw new Error("status " + response.status);
        }
        say("Following this run's events as they happen.");
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) {
              return false;
            }
            retries = 0;
            buffer = (buffer + decoder.decode(chunk.value, { stream: true }))
              .replace(/\r\n/g, "\n");
            var at = buffer.indexOf("\n\n");
            while (at >= 0) {
              var block = buffer.slice(0, at);
              buffer = buffer.slice(at + 2);
              if (frame(block)) {
                reader.cancel();
                return true;
              }
              at = buffer.indexOf("\n\n");
            }
            return pump();
          });
        }
        return pump();
      })
      .then(function (done) {
        if (!done) {
          retry();
        }
      }, retry);
  }

  follow();
})();
