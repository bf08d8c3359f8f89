// Added by CodeHub's proxy to a VS Code workbench: when the workspace
// stops, is archived, moves or fails, the workbench says why (VS Code on
// its own only says it cannot reconnect). It asks the proxy, never the
// workspace, so it neither wakes the workspace nor counts as its use.
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script) {
    return;
  }
  var statusURL = script.src.replace(/workbench\.js(\?.*)?$/, "status");
  var visibleEvery = 5000;
  var hiddenEvery = 30000;
  var banner = null;
  var timer = 0;

  function show(title, message) {
    if (!banner) {
      banner = document.createElement("div");
      banner.id = "codehub-notice";
      banner.setAttribute("role", "alert");
      var s = banner.style;
      s.position = "fixed";
      s.top = "0";
      s.left = "0";
      s.right = "0";
      s.zIndex = "2147483647";
      s.display = "flex";
      s.flexWrap = "wrap";
      s.alignItems = "center";
      s.gap = "0.75em";
      s.padding = "0.75em 1em";
      s.background = "#1d2330";
      s.color = "#fff";
      s.font = "14px system-ui, -apple-system, sans-serif";
      s.boxShadow = "0 2px 8px rgba(0,0,0,.35)";
      var strong = document.createElement("strong");
      var text = document.createElement("span");
      text.style.flex = "1 1 20em";
      var reload = document.createElement("button");
      reload.type = "button";
      reload.textContent = "Reload";
      reload.style.font = "inherit";
      reload.style.padding = "0.3em 1em";
      reload.style.cursor = "pointer";
      reload.addEventListener("click", function () {
        window.location.reload();
      });
      banner.appendChild(strong);
      banner.appendChild(text);
      banner.appendChild(reload);
      document.body.appendChild(banner);
    }
    banner.children[0].textContent = title;
    banner.children[1].textContent = message;
  }

  function hide() {
    if (banner) {
      banner.remove();
      banner = null;
    }
  }

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(check, ms);
  }

  function check() {
    fetch(statusURL, { credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        if (res.status === 401) {
          show("Signed out", "Your session has ended. Reload the window to sign in again.");
          return null;
        }
        return res.ok ? res.json() : null;
      })
      .then(function (n) {
        if (!n) {
          return;
        }
        if (n.running) {
          hide();
        } else {
          show(n.title, n.message);
        }
      })
      .catch(function () {
        // CodeHub itself is out of reach; the next check tells.
      })
      .finally(function () {
        schedule(document.visibilityState === "hidden" ? hiddenEvery : visibleEvery);
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      schedule(0);
    }
  });
  window.addEventListener("online", function () {
    schedule(0);
  });
  schedule(visibleEvery);
})();
