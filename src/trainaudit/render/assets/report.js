/* trainaudit HTML report charts: hand-written SVG line charts (no library, no network).
   Per chart: curves (several runs overlaid), tolerance band, first bad step, markers, non-finite
   points as red triangles on the top edge; drag to zoom on x, double-click or Reset to zoom out,
   hover for the values of every curve at the nearest step, legend entries toggle curves. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var M = { l: 62, r: 14, t: 12, b: 34 };

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function num(v) { return typeof v === "number" ? v : NaN; }  // "nan"/"inf"/"-inf"/null -> NaN
  function fmt(v) {
    if (typeof v !== "number") return String(v);
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(3);
    return String(parseFloat(v.toPrecision(5)));
  }
  function ticks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }
  function lowerBound(arr, x) {
    var lo = 0, hi = arr.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function Chart(fig, spec) {
    this.fig = fig; this.spec = spec;
    this.box = fig.querySelector(".plot");
    this.hidden = {};
    var xs = [];
    spec.curves.forEach(function (c) { if (c.steps.length) { xs.push(c.steps[0], c.steps[c.steps.length - 1]); } });
    if (spec.band && spec.band.steps.length) xs.push(spec.band.steps[0], spec.band.steps[spec.band.steps.length - 1]);
    this.full = [Math.min.apply(null, xs), Math.max.apply(null, xs)];
    if (!(this.full[1] > this.full[0])) this.full = [this.full[0] - 1, this.full[0] + 1];
    this.view = this.full.slice();
    this.tip = document.createElement("div"); this.tip.className = "tip"; this.box.appendChild(this.tip);
    var tools = document.createElement("div"); tools.className = "tools";
    var reset = document.createElement("button"); reset.type = "button"; reset.textContent = "Reset zoom";
    var self = this;
    reset.addEventListener("click", function () { self.zoom(self.full[0], self.full[1]); });
    tools.appendChild(reset); this.box.appendChild(tools);
    this.legend();
    this.draw();
    window.addEventListener("resize", function () { self.draw(); });
  }

  Chart.prototype.legend = function () {
    var self = this, lg = this.fig.querySelector(".legend");
    this.spec.curves.forEach(function (c, i) {
      var b = document.createElement("button"); b.type = "button";
      b.innerHTML = '<span class="sw"></span>';
      b.firstChild.style.background = COLORS[i % COLORS.length];
      b.appendChild(document.createTextNode(c.label));
      b.addEventListener("click", function () { self.hidden[i] = !self.hidden[i]; b.classList.toggle("off"); self.draw(); });
      lg.appendChild(b);
    });
    if (this.spec.band) {
      var s = document.createElement("span");
      s.innerHTML = '<span class="sw band" style="background:#2ca02c"></span>';
      s.appendChild(document.createTextNode(this.spec.band.label)); lg.appendChild(s);
    }
    if (this.spec.first_bad_step !== null && this.spec.first_bad_step !== undefined) {
      var f = document.createElement("span");
      f.innerHTML = '<span class="sw" style="background:#c62828"></span>';
      f.appendChild(document.createTextNode("first bad step " + this.spec.first_bad_step)); lg.appendChild(f);
    }
  };

  Chart.prototype.zoom = function (a, b) {
    if (b - a < 1e-9) return;
    this.view = [Math.max(this.full[0], a), Math.min(this.full[1], b)];
    this.fig.setAttribute("data-zoomed", this.view[0] === this.full[0] && this.view[1] === this.full[1] ? "0" : "1");
    this.draw();
  };

  Chart.prototype.yRange = function () {
    var lo = Infinity, hi = -Infinity, v0 = this.view[0], v1 = this.view[1], self = this;
    function scan(steps, vals) {
      var i = Math.max(0, lowerBound(steps, v0) - 1), n = steps.length;
      for (; i < n; i++) {  // one point either side of the view: lines leaving the view count
        var v = num(vals[i]);
        if (isFinite(v) && (!self.logy || v > 0)) { if (v < lo) lo = v; if (v > hi) hi = v; }
        if (steps[i] > v1) break;
      }
    }
    this.spec.curves.forEach(function (c, i) { if (!self.hidden[i]) scan(c.steps, c.values); });
    if (this.spec.band) { scan(this.spec.band.steps, this.spec.band.low); scan(this.spec.band.steps, this.spec.band.high); }
    if (lo === Infinity) { lo = 0; hi = 1; }
    if (this.logy) { return [Math.log10(lo) - 0.05, Math.log10(hi) + 0.05]; }
    var pad = (hi - lo) * 0.06 || Math.abs(hi) * 0.05 || 1;
    return [lo - pad, hi + pad];
  };

  Chart.prototype.draw = function () {
    var spec = this.spec, self = this;
    var W = this.box.clientWidth || 800, H = this.box.clientHeight || 300;
    var old = this.box.querySelector("svg"); if (old) old.remove();
    var allPos = true;
    spec.curves.forEach(function (c) { c.values.forEach(function (v) { if (typeof v === "number" && v <= 0) allPos = false; }); });
    this.logy = !!spec.logy && allPos;
    var yr = this.yRange(), x0 = this.view[0], x1 = this.view[1];
    var pw = W - M.l - M.r, ph = H - M.t - M.b;
    var X = function (s) { return M.l + (s - x0) / (x1 - x0) * pw; };
    var Y = function (v) { var t = self.logy ? Math.log10(v) : v; return M.t + (1 - (t - yr[0]) / (yr[1] - yr[0])) * ph; };
    this.X = X; this.pw = pw;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": spec.title || spec.metric });
    this.box.insertBefore(svg, this.box.firstChild);
    var clipId = "clip-" + this.fig.id;
    el("rect", { x: M.l, y: M.t, width: pw, height: ph }, el("clipPath", { id: clipId }, el("defs", {}, svg)));
    // grid + axes
    var grid = el("g", { "class": "grid" }, svg), axis = el("g", { "class": "axis" }, svg);
    ticks(x0, x1, Math.max(2, Math.floor(pw / 90))).forEach(function (t) {
      el("line", { x1: X(t), x2: X(t), y1: M.t, y2: M.t + ph }, grid);
      el("text", { x: X(t), y: H - M.b + 15, "text-anchor": "middle" }, axis).textContent = fmt(t);
    });
    var yt = ticks(yr[0], yr[1], Math.max(2, Math.floor(ph / 45)));
    yt.forEach(function (t) {
      var v = self.logy ? Math.pow(10, t) : t, y = self.logy ? M.t + (1 - (t - yr[0]) / (yr[1] - yr[0])) * ph : Y(t);
      el("line", { x1: M.l, x2: M.l + pw, y1: y, y2: y }, grid);
      el("text", { x: M.l - 6, y: y + 4, "text-anchor": "end" }, axis).textContent = fmt(v);
    });
    el("rect", { x: M.l, y: M.t, width: pw, height: ph, fill: "none", stroke: "#c5ccd5" }, svg);
    el("text", { x: M.l + pw / 2, y: H - 4, "text-anchor": "middle" }, axis).textContent = spec.xlabel || "step";
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    // tolerance band: low edge forward, high edge back, one polygon per finite stretch
    if (spec.band) {
      var b = spec.band, pts = [], hi = [];
      var flush = function () {
        if (pts.length > 1) el("path", { "class": "band", d: "M" + pts.concat(hi.reverse()).join("L") + "Z", fill: "#2ca02c", "fill-opacity": 0.16 }, plot);
        pts = []; hi = [];
      };
      for (var i = 0; i < b.steps.length; i++) {
        var lo = num(b.low[i]), h = num(b.high[i]);
        if (isFinite(lo) && isFinite(h) && (!self.logy || lo > 0)) { pts.push(X(b.steps[i]).toFixed(1) + "," + Y(lo).toFixed(1)); hi.push(X(b.steps[i]).toFixed(1) + "," + Y(h).toFixed(1)); }
        else flush();
      }
      flush();
    }
    // curves: gaps at non-finite values, which get a red triangle on the top edge instead
    spec.curves.forEach(function (c, ci) {
      if (self.hidden[ci]) return;
      var color = COLORS[ci % COLORS.length], d = "", pen = false, bad = [];
      for (var i = 0; i < c.steps.length; i++) {
        var v = num(c.values[i]);
        if (!isFinite(v) || (self.logy && v <= 0)) { pen = false; if (!isFinite(v)) bad.push(c.steps[i]); continue; }
        d += (pen ? "L" : "M") + X(c.steps[i]).toFixed(1) + "," + Y(v).toFixed(1); pen = true;
      }
      var attrs = { "class": "curve", d: d || "M0,0", fill: "none", stroke: color, "stroke-width": 1.5, "stroke-linejoin": "round" };
      if (c.style === "dashed") attrs["stroke-dasharray"] = "6 4";
      if (c.style === "points") { attrs["stroke-width"] = 0; }
      el("path", attrs, plot);
      if (c.style === "points") {
        for (var j = 0; j < c.steps.length; j++) { var pv = num(c.values[j]); if (isFinite(pv)) el("circle", { cx: X(c.steps[j]), cy: Y(pv), r: 2, fill: color }, plot); }
      }
      bad.forEach(function (s) {
        var x = X(s);
        if (x >= M.l && x <= M.l + pw) el("path", { "class": "nonfinite", d: "M" + (x - 5) + "," + M.t + "L" + (x + 5) + "," + M.t + "L" + x + "," + (M.t + 9) + "Z", fill: "#d62728" }, svg)
          .appendChild(el("title", {})).textContent = c.label + ": non-finite at step " + s;
      });
    });
    (spec.markers || []).forEach(function (m) {
      el("line", { x1: X(m[0]), x2: X(m[0]), y1: M.t, y2: M.t + ph, stroke: "#888", "stroke-dasharray": "4 3" }, plot);
      el("text", { x: X(m[0]) + 3, y: M.t + ph - 4, fill: "#666", "font-size": 10 }, plot).textContent = m[1];
    });
    if (spec.first_bad_step !== null && spec.first_bad_step !== undefined) {
      var fx = X(spec.first_bad_step);
      el("line", { "class": "first-bad", x1: fx, x2: fx, y1: M.t, y2: M.t + ph, stroke: "#c62828", "stroke-width": 1.5, "stroke-dasharray": "3 3" }, plot);
      el("text", { x: fx + 4, y: M.t + 22, fill: "#c62828", "font-size": 11 }, plot).textContent = "first bad step " + spec.first_bad_step;
    }
    // interaction layer
    var cross = el("line", { y1: M.t, y2: M.t + ph, stroke: "#555", "stroke-width": 0.7, visibility: "hidden" }, svg);
    var sel = el("rect", { y: M.t, height: ph, fill: "#0b5cad", "fill-opacity": 0.12, visibility: "hidden" }, svg);
    var hit = el("rect", { "class": "hit", x: M.l, y: M.t, width: pw, height: ph, fill: "transparent", cursor: "crosshair" }, svg);
    var dragFrom = null;
    var toStep = function (ev) { var r = svg.getBoundingClientRect(); var px = (ev.clientX - r.left) * W / r.width; return { px: px, s: x0 + (px - M.l) / pw * (x1 - x0) }; };
    hit.addEventListener("mousedown", function (ev) { dragFrom = toStep(ev); ev.preventDefault(); });
    hit.addEventListener("mousemove", function (ev) {
      var p = toStep(ev);
      if (dragFrom) {
        sel.setAttribute("x", Math.min(dragFrom.px, p.px)); sel.setAttribute("width", Math.abs(p.px - dragFrom.px)); sel.setAttribute("visibility", "visible");
      }
      self.hover(p, ev, cross);
    });
    hit.addEventListener("mouseup", function (ev) {
      var p = toStep(ev); sel.setAttribute("visibility", "hidden");
      if (dragFrom && Math.abs(p.px - dragFrom.px) > 4) self.zoom(Math.min(dragFrom.s, p.s), Math.max(dragFrom.s, p.s));
      dragFrom = null;
    });
    hit.addEventListener("mouseleave", function () { dragFrom = null; sel.setAttribute("visibility", "hidden"); cross.setAttribute("visibility", "hidden"); self.tip.style.display = "none"; });
    hit.addEventListener("dblclick", function () { self.zoom(self.full[0], self.full[1]); });
    this.fig.setAttribute("data-drawn", String(svg.querySelectorAll("path.curve").length));
  };

  Chart.prototype.hover = function (p, ev, cross) {
    var spec = this.spec, self = this, rows = [], best = null;
    spec.curves.forEach(function (c, ci) {
      if (self.hidden[ci] || !c.steps.length) return;
      var i = lowerBound(c.steps, p.s);
      if (i > 0 && (i === c.steps.length || Math.abs(c.steps[i - 1] - p.s) <= Math.abs(c.steps[i] - p.s))) i--;
      var s = c.steps[i];
      if (best === null || Math.abs(s - p.s) < Math.abs(best - p.s)) best = s;
      rows.push('<span style="color:' + COLORS[ci % COLORS.length] + '">●</span> ' + esc(c.label) + ": <b>" + esc(fmt(c.values[i])) + "</b> @ " + s);
    });
    if (best === null) return;
    var x = this.X(best);
    cross.setAttribute("x1", x); cross.setAttribute("x2", x); cross.setAttribute("visibility", "visible");
    this.tip.innerHTML = "step " + best + "<br>" + rows.join("<br>");
    this.tip.style.display = "block";
    var r = this.box.getBoundingClientRect(), left = ev.clientX - r.left + 12;
    if (left + this.tip.offsetWidth > r.width) left = ev.clientX - r.left - this.tip.offsetWidth - 12;
    this.tip.style.left = Math.max(0, left) + "px"; this.tip.style.top = (ev.clientY - r.top + 10) + "px";
  };

  function esc(s) { return String(s).replace(/[&<>"]/g, function (ch) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[ch]; }); }

  var data = JSON.parse(document.getElementById("ta-data").textContent);
  data.charts.forEach(function (spec, i) {
    var fig = document.getElementById("chart-" + i);
    if (fig && spec.curves && spec.curves.length) new Chart(fig, spec);
  });
  // evidence links: flash the target after the browser scrolled to it
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a.ev");
    if (!a) return;
    var t = document.getElementById(a.getAttribute("href").slice(1));
    if (!t) return;
    document.querySelectorAll(".flash").forEach(function (e) { e.classList.remove("flash"); });
    t.classList.add("flash");
  });
  document.body.setAttribute("data-ready", "1");
})();
