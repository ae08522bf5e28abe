// surehand console: refresh regions marked data-live="URL" every few seconds, without reloading
// the page. The server renders every page completely; without JavaScript nothing is lost but
// the refresh.
"use strict";
(function () {
  var EVERY_MS = 3000;
  function refresh(region) {
    if (document.hidden) { return; }
    fetch(region.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected) { window.location.reload(); return null; }  // signed out
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          region.innerHTML = html;
          region.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () { /* the next poll tries again */ });
  }
  document.querySelectorAll("[data-live]").forEach(function (region) {
    window.setInterval(function () { refresh(region); }, EVERY_MS);
  });
})();
