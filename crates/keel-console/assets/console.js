// keel console: small progressive enhancements; every page works without this script.
// Nothing here writes HTML: text only (textContent), never innerHTML.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Mark the navigation's link to the section this page is in.
  var path = window.location.pathname;
  document.querySelectorAll("header.top nav a").forEach(function (link) {
    var section = link.getAttribute("href");
    if (path === section || path.indexOf(section + "/") === 0) {
      link.setAttribute("aria-current", "page");
    }
  });
});
