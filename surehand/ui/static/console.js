// surehand console: regions marked data-live="URL" update themselves every few seconds.
// The server renders every page completely; without JavaScript nothing is lost but the update.
//
// An update changes only what changed, in place: nodes that are the same are kept (so the
// keyboard focus stays where it is and a text selection is not lost), text that changed is
// rewritten, and cards are matched by their data-key. When the server does not answer, the
// page says so (#stale) instead of looking current.
"use strict";
(function () {
  var EVERY_MS = 3000;
  var stale = document.getElementById("stale");
  var last = new Map();  // region -> the HTML it last showed

  function setStale(on) {
    if (!stale) { return; }
    stale.hidden = !on;
    document.documentElement.toggleAttribute("data-stale", on);
  }

  function keyOf(node) {
    return node.nodeType === 1 ? node.getAttribute("data-key") : null;
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b);
  }

  function morphAttributes(target, source) {
    var i, name;
    for (i = target.attributes.length - 1; i >= 0; i--) {
      name = target.attributes[i].name;
      if (!source.hasAttribute(name)) { target.removeAttribute(name); }
    }
    for (i = 0; i < source.attributes.length; i++) {
      name = source.attributes[i].name;
      if (target.getAttribute(name) !== source.attributes[i].value) {
        target.setAttribute(name, source.attributes[i].value);
      }
    }
  }

  // Make target's children look like source's, keeping every node that can be kept: a keyed
  // node (data-key) is matched by its key wherever it is, any other by its position. A kept
  // node is moved only if the order changed (moving a node would drop the focus inside it).
  function morphChildren(target, source) {
    var wanted = Array.prototype.slice.call(source.childNodes);
    var keyed = {};
    Array.prototype.forEach.call(target.childNodes, function (node) {
      var k = keyOf(node);
      if (k) { keyed[k] = node; }
    });
    wanted.forEach(function (next, i) {
      var k = keyOf(next);
      var here = target.childNodes[i] || null;
      var match = null;
      if (k) {
        match = keyed[k] && sameKind(keyed[k], next) ? keyed[k] : null;
        delete keyed[k];
      } else if (here && !keyOf(here) && sameKind(here, next)) {
        match = here;
      }
      if (match) {
        if (match !== here) { target.insertBefore(match, here); }
        morph(match, next);
      } else {
        target.insertBefore(next, here);
      }
    });
    while (target.childNodes.length > wanted.length) { target.removeChild(target.lastChild); }
  }

  function morph(target, source) {
    if (target.nodeType === 3 || target.nodeType === 8) {
      if (target.nodeValue !== source.nodeValue) { target.nodeValue = source.nodeValue; }
      return;
    }
    morphAttributes(target, source);
    morphChildren(target, source);
  }

  function refresh(region) {
    if (document.hidden) { return; }
    fetch(region.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected) { window.location.reload(); return null; }  // signed out
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        setStale(false);
        if (html !== last.get(region)) {
          var fresh = document.createElement(region.nodeName);
          fresh.innerHTML = html;
          morphChildren(region, fresh);
          last.set(region, html);
        }
        region.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { setStale(true); });  // the next poll tries again
  }

  document.querySelectorAll("[data-live]").forEach(function (region) {
    window.setInterval(function () { refresh(region); }, EVERY_MS);
  });
})();
