// POP pages: behaviour kept out of the templates so the Content-Security-Policy can forbid
// inline scripts ("script-src 'self'").
(function () {
  "use strict";

  // Auto-refresh: every element with data-refresh-url gets its inner HTML re-fetched every 5 s.
  document.querySelectorAll("[data-refresh-url]").forEach(function (box) {
    var timer = setInterval(function () {
      if (box.querySelector("details[open]") || box.contains(document.activeElement)) return;
      if (box.querySelector("input[type=checkbox]:checked")) return;  // a selection in progress
      fetch(box.dataset.refreshUrl, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
        .then(function (response) {
          if (response.redirected) { window.location.reload(); return null; }
          return response.ok ? response.text() : null;
        })
        .then(function (html) {
          if (html === null) return;
          box.innerHTML = html;
          if (box.querySelector("[data-refresh-stop]")) clearInterval(timer);
        })
        .catch(function () {});
    }, 5000);
  });

  // A [data-check-all] box ticks or clears every row box of its table.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches("[data-check-all]")) return;
    box.closest("table").querySelectorAll("tbody input[type=checkbox]").forEach(function (row) {
      row.checked = box.checked;
    });
  });

  // Forms with data-confirm="question?" ask before they submit.
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });
})();
