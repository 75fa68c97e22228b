// Scroll console, issue 11: a click on a point of a session's budget chart opens the context
// window of the model call that followed that compress (/sessions/<id>/calls/?compress=<id>;
// each point carries its compress row id as customdata). No inline script: the CSP.
(function () {
  "use strict";

  // A point of a recorded session is a call ("call:<index>"): it opens that call itself.
  function callUrl(el, row) {
    var base = el.dataset.callsUrl || (window.location.pathname.replace(/\/?$/, "/") + "calls/");
    var text = String(row);
    if (text.indexOf("call:") === 0) return base + encodeURIComponent(text.slice(5)) + "/";
    return base + "?compress=" + encodeURIComponent(row);
  }

  function bind(root) {
    var scope = root && root.querySelectorAll ? root : document;
    var charts = Array.from(scope.querySelectorAll("#budget-chart"));
    if (scope.id === "budget-chart") charts.push(scope);
    charts.forEach(function (el) {
      if (typeof el.on !== "function" || el.dataset.callsBound === "1") return;
      el.dataset.callsBound = "1";
      el.classList.add("clickable");
      el.on("plotly_click", function (evt) {
        var points = (evt && evt.points) || [];
        var point = points.find(function (p) { return p.customdata !== undefined && p.customdata !== null; });
        if (point) window.location.assign(callUrl(el, point.customdata));
      });
    });
  }

  // Charts are drawn by scroll.js once Plotly has loaded, and redrawn after live swaps;
  // bind once each chart element exists and has been drawn.
  // A swapped-in chart is drawn a moment after the swap settles: look again until it is.
  function soon() { window.setTimeout(function () { untilDrawn(40); }, 0); }
  // The first draw may land a little after "load" (Plotly is deferred): look again a few times.
  function untilDrawn(tries) {
    bind(document);
    var el = document.getElementById("budget-chart");
    if (el && el.dataset.callsBound !== "1" && tries > 0) {
      window.setTimeout(function () { untilDrawn(tries - 1); }, 250);
    }
  }
  window.addEventListener("load", function () { untilDrawn(40); });
  document.addEventListener("htmx:afterSettle", function () { soon(); });
})();
