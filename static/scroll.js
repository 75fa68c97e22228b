// Scroll console: draw the Plotly charts, keep live tables bounded, and update a
// session's charts in place. Live rows arrive as hx-swap-oob fragments over
// the WebSocket (htmx's ws extension); this file only reacts to them.
(function () {
  "use strict";
  var MAX_LIVE_ROWS = 300;

  // Each chart is drawn once, then updated in place with Plotly.react: the figure's layout
  // carries uirevision "keep", so zoom, legend choices and the axes survive every update.
  function drawCharts(root) {
    if (typeof Plotly === "undefined") return;
    root.querySelectorAll(".chart[data-figure]").forEach(function (el) {
      var data = document.getElementById(el.dataset.figure);
      if (!data) return;
      // A figure sits in a data-json attribute (live parts) or a json_script's text.
      var text = data.dataset.json !== undefined ? data.dataset.json : data.textContent;
      if (el.dataset.figureText === text) return;  // nothing new
      el.dataset.figureText = text;
      var fig = JSON.parse(text);
      // No modebar: its per-chart inline styles would break the CSP (dashboard/console/vendor.py).
      Plotly.react(el, fig.data, fig.layout, {displayModeBar: false, responsive: true});
    });
  }

  function trim(id) {
    var body = document.getElementById(id);
    if (!body) return;
    while (body.children.length > MAX_LIVE_ROWS) body.removeChild(body.lastElementChild);
  }

  // A stacked table (a card per row on a phone, static/scroll.css) names each cell by its
  // column's header, so the header row stays the one place that says what a column is, and
  // rows that arrive live are named like the rows the page drew.
  function labelCells(root) {
    root.querySelectorAll("table.stack").forEach(function (table) {
      var head = table.tHead && table.tHead.rows[0];
      if (!head) return;
      var names = [];
      Array.from(head.cells).forEach(function (th) {
        for (var i = 0; i < th.colSpan; i++) names.push(th.textContent.trim());
      });
      Array.from(table.tBodies).forEach(function (body) {
        Array.from(body.rows).forEach(function (row) {
          var column = 0;
          Array.from(row.cells).forEach(function (cell) {
            var name = names[column];
            column += cell.colSpan;
            if (cell.tagName === "TD" && cell.colSpan === 1 && name && !cell.hasAttribute("data-label")) {
              cell.setAttribute("data-label", name);
            }
          });
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    labelCells(document);
    // plotly.min.js loads deferred too; charts draw once both are in.
    if (typeof Plotly === "undefined") {
      window.addEventListener("load", function () { drawCharts(document); });
    } else {
      drawCharts(document);
    }
  });

  // A row this page already shows is not inserted again: the catch-up a socket sends on
  // (re)connect may overlap the rows the page rendered or received live. Replacing swaps
  // (the fragment's element has the target's id) are left alone.
  function dropShown(evt) {
    var detail = evt.detail || {};
    var fragment = detail.fragment, target = detail.target;
    if (!fragment || !target || !fragment.children) return;
    // Only the top-level elements of an insertion: a replacement's own descendants keep
    // their ids (a live part replaced whole carries the ids the page already has).
    Array.from(fragment.children).forEach(function (el) {
      if (el.id && el.id !== target.id && document.getElementById(el.id)) el.remove();
    });
  }

  // A moved row (an insertion marked data-move) replaces the one the page shows wherever it
  // is, in the same swap, so no frame shows the row twice or not at all; the ids named in
  // data-removes (an empty-table note) go with it.
  function moveShown(evt) {
    var detail = evt.detail || {};
    var fragment = detail.fragment, target = detail.target;
    if (!fragment || !target || !fragment.dataset || fragment.dataset.move === undefined) {
      dropShown(evt);
      return;
    }
    Array.from(fragment.children).forEach(function (el) {
      var shown = el.id ? document.getElementById(el.id) : null;
      if (shown && shown !== target) shown.remove();
    });
    (fragment.dataset.removes || "").split(/\s+/).forEach(function (id) {
      var el = id ? document.getElementById(id) : null;
      if (el) el.remove();
    });
  }

  // An empty table (or list) shows a "none" row, hidden while other rows share its body.
  function markEmpty() {
    document.querySelectorAll("tbody > tr.none, ul > li.none").forEach(function (row) {
      row.hidden = row.parentNode.children.length > 1;
    });
  }

  document.addEventListener("htmx:afterSwap", function (evt) {
    drawCharts(evt.target.parentNode || document);
    labelCells(document);
  });
  document.addEventListener("htmx:oobBeforeSwap", moveShown);
  document.addEventListener("htmx:oobAfterSwap", function (evt) {
    markEmpty();
    trim("span-rows");
    trim("timeline");
  });
  // After each frame: a delete swap (a row moved to another table) and a replaced element
  // (its events fire on the detached old one) never reach the listeners above. Redraw the
  // charts whose figure changed (#session-figures) and mark empty tables.
  document.addEventListener("htmx:wsAfterMessage", function () {
    markEmpty();
    labelCells(document);
    drawCharts(document);
  });
  // Live frames arrive over the socket, where htmx's ws extension swaps each top-level element
  // into its target. Two shapes need help first: a row wrapped in <template> (so the parser
  // keeps a lone <tr>) is unwrapped, and a swap whose target this page does not have (a
  // session page has no sessions table, only the alerts page has alert tables) is dropped,
  // which htmx would otherwise report as an error.
  function oobTarget(el) {
    var swap = el.getAttribute("hx-swap-oob");
    if (swap === null) return null;
    var colon = swap.indexOf(":");
    var selector = colon > 0 ? swap.slice(colon + 1) : "#" + el.id;
    if (!/^#[\w:-]+$/.test(selector)) return null;  // not a plain id: leave it to htmx
    return selector.slice(1);
  }

  if (typeof htmx !== "undefined") {
    htmx.defineExtension("scroll-oob", {
      transformResponse: function (text) {
        if (text.indexOf("hx-swap-oob") < 0 && text.indexOf("<template") < 0) return text;
        var holder = document.createElement("template");
        holder.innerHTML = text;
        var changed = false;
        Array.from(holder.content.children).forEach(function (el) {
          if (el.tagName === "TEMPLATE") {
            el.replaceWith.apply(el, Array.from(el.content.childNodes));
            changed = true;
          }
        });
        Array.from(holder.content.children).forEach(function (el) {
          var target = oobTarget(el);
          if (target !== null && !document.getElementById(target)) {
            el.remove();
            changed = true;
          }
        });
        return changed ? holder.innerHTML : text;
      }
    });
  }

  document.addEventListener("htmx:wsOpen", function () { document.body.dataset.live = "open"; });
  document.addEventListener("htmx:wsClose", function () { document.body.dataset.live = "closed"; });
})();
