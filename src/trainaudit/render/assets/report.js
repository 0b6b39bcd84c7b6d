/* trainaudit HTML report charts, drawn with uPlot (vendored beside this file, inlined in the page;
   docs/ci.md says why uPlot). uPlot does the axes (sized to their labels), drag-to-zoom,
   double-click reset, the live legend (hover values, click to hide a curve) and log scales; this
   file adds what a report needs on top, in a draw hook: the gated window shaded, the golden band
   filled, the first bad step, rule markers whose labels never overlap, non-finite points as red
   triangles on the top edge, and points beyond the focused y range as grey triangles on the edge
   they pass; the NaN/Inf tail as a labelled band on an x-axis that ends shortly after it starts,
   the peak an explosion left off scale, the learning rate on a right axis, smoothed curves over
   their faint raw values, and a golden chart's relative-difference panel zoomed with it (the
   y-axis, smoothing and tail come computed in charts.json, the same as the PNG plots use). */
(function () {
  "use strict";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var HEIGHT = 300, PANEL_HEIGHT = 190;
  var charts = [];

  function num(v) { return typeof v === "number" ? v : NaN; }  // "nan"/"inf"/"-inf"/null -> NaN
  // A tick or value: short, so it fits its axis ("1.5e15", not "1.500e+15").
  function fmt(v) {
    if (typeof v !== "number") return v === null || v === undefined ? "–" : String(v);
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(2).replace(/\.?0+e/, "e").replace("e+", "e");
    return String(parseFloat(v.toPrecision(5)));
  }
  // tick labels; a split uPlot filtered out (a log axis's minor ticks) stays unlabelled
  function ticks(u, splits) { return splits.map(function (v) { return v === null ? null : fmt(v); }); }
  // uPlot's axis-autosize recipe: the axis is as wide as its longest label.
  function axisSize(u, values, i, cycle) {
    var axis = u.axes[i];
    if (cycle > 1) return axis._size;
    var size = axis.ticks.size + axis.gap, longest = "";
    (values || []).forEach(function (v) { if (v && v.length > longest.length) longest = v; });
    if (longest) { u.ctx.font = axis.font[0]; size += u.ctx.measureText(longest).width / devicePixelRatio; }
    return Math.ceil(size) + 4;
  }

  // what a report shows first: when the run is NaN/Inf to its end, the x-axis ends a little after
  // that stretch starts (its band's label says where it ends), as in the PNG plots
  var TAIL_SHARE = 0.2;
  function view(spec, full) {
    var t = spec.nonfinite_tail;
    if (!t || !(full[1] > full[0]) || (full[1] - t[0]) / (full[1] - full[0]) <= TAIL_SHARE) return full;
    var right = t[0] + Math.max(3, TAIL_SHARE / (1 - TAIL_SHARE) * (t[0] - full[0]));
    if (spec.first_bad_step !== null && spec.first_bad_step !== undefined) right = Math.max(right, spec.first_bad_step + 3);
    return [full[0], Math.min(right, full[1])];
  }
  function faint(hex) {  // a curve's colour, see-through: its raw values under its smoothed line
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + ",0.3)";
  }
  var RIGHT = "#9467bd";

  // parent: the chart a panel sits under (the panel takes its x range, and zooms with it)
  function build(fig, spec, box, sync, parent) {
    var curves = spec.curves, band = spec.band, right = spec.right || [];
    // one x array (every step of every curve and of the band), every series aligned on it
    var seen = {};
    curves.concat(right).forEach(function (c) { c.steps.forEach(function (s) { seen[s] = 1; }); });
    if (band) band.steps.forEach(function (s) { seen[s] = 1; });
    var xs = Object.keys(seen).map(Number).sort(function (a, b) { return a - b; });
    var at = {};
    xs.forEach(function (s, i) { at[s] = i; });
    // a step the series does not log is undefined (uPlot joins over it); a non-finite value is
    // null (a gap in the line, and a red triangle)
    function align(steps, values) {
      var out = new Array(xs.length).fill(undefined);
      for (var i = 0; i < steps.length; i++) { var v = num(values[i]); out[at[steps[i]]] = isFinite(v) ? v : null; }
      return out;
    }
    var yscale = spec.yscale || (spec.logy ? "log" : "linear");
    if (yscale === "log" && !curves.every(function (c) { return c.values.every(function (v) { return typeof v !== "number" || v > 0; }); })) yscale = "linear";
    var logy = yscale === "log";
    var data = [xs], series = [{ label: spec.xlabel || "step", value: function (u, v) { return v === null ? "–" : String(v); } }];
    var rawIndex = [];  // per curve, its raw series (the one the NaN/Inf triangles belong to)
    curves.forEach(function (c, i) {
      var color = COLORS[i % COLORS.length], smooth = !!c.smoothed;
      data.push(align(c.steps, c.values));
      rawIndex.push(series.length);
      series.push({ label: smooth ? c.label + " (raw)" : c.label, stroke: smooth ? faint(color) : color,
                    width: c.style === "points" ? 0 : (smooth ? 1 : 1.5),
                    dash: c.style === "dashed" && !smooth ? [6, 4] : undefined, spanGaps: false,
                    points: { show: c.style === "points", size: 4, fill: color },
                    value: function (u, v) { return fmt(v); } });
      if (smooth) {
        data.push(align(c.steps, c.smoothed));
        series.push({ label: c.label + ", " + spec.smoothing_label, stroke: color, width: 2,
                      dash: c.style === "dashed" ? [6, 4] : undefined, spanGaps: false, points: { show: false },
                      value: function (u, v) { return fmt(v); } });
      }
    });
    var rmax = 0, rmin = Infinity;
    right.forEach(function (c) {
      data.push(align(c.steps, c.values));
      c.values.forEach(function (v) { if (typeof v === "number") { rmax = Math.max(rmax, v); rmin = Math.min(rmin, v); } });
      series.push({ label: c.label + " (right axis)", stroke: RIGHT, width: 1, scale: "right", spanGaps: true,
                    points: { show: false }, value: function (u, v) { return fmt(v); } });
    });
    var bands = [];
    if (band) {
      data.push(align(band.steps, band.high), align(band.steps, band.low));
      var hi = series.length;
      series.push({ label: band.label, stroke: "rgba(44,160,44,0.5)", width: 0.5, points: { show: false }, value: function (u, v) { return fmt(v); } },
                  { label: band.label + " (low)", stroke: "rgba(44,160,44,0.5)", width: 0.5, points: { show: false }, value: function (u, v) { return fmt(v); } });
      bands.push({ series: [hi, hi + 1], fill: "rgba(44,160,44,0.16)" });
    }
    var full = [xs[0], xs[xs.length - 1]];
    if (!(full[1] > full[0])) full = [full[0] - 1, full[0] + 1];
    var shown = view(spec, full);
    if (parent) { full = parent.whole; shown = parent.full; }
    var chart = { fig: fig, spec: spec, zoomed: false, full: shown, whole: full };
    var yopts = { distr: logy ? 3 : (yscale === "symlog" ? 4 : 1), range: function (u, min, max) {
      if (!chart.zoomed && spec.yrange && yscale === "linear") return spec.yrange.slice();
      if (logy) return uPlot.rangeLog(min, max, 10, true);
      if (yscale === "symlog") return uPlot.rangeAsinh(min, max, 10, true);
      return uPlot.rangeNum(min, max, 0.08, true);
    } };
    if (yscale === "symlog") yopts.asinh = spec.linthresh || 1;
    var scales = {
      x: { time: false, range: function (u, min, max) {
        // the whole data range (first draw, double-click) is the view the report starts with
        if (!(max > min) || (min <= full[0] && max >= full[1])) return shown.slice();
        return [min, max];
      } },
      y: yopts
    };
    var axes = [{ label: spec.xlabel || "step", values: ticks }, { label: spec.ylabel || undefined, size: axisSize, values: ticks }];
    if (right.length) {
      var rlog = spec.right_scale === "log" && rmin > 0;
      scales.right = rlog ? { distr: 3 } : { range: function () { return [rmin >= 0 ? 0 : rmin, (rmax * 1.08) || 1]; } };
      axes.push({ scale: "right", side: 1, label: spec.right_label || undefined, stroke: RIGHT, size: axisSize,
                  values: ticks, grid: { show: false } });
    }
    var opts = {
      width: box.clientWidth || 800, height: spec.is_panel ? PANEL_HEIGHT : HEIGHT, series: series, bands: bands,
      scales: scales, axes: axes,
      cursor: { drag: { x: true, y: false }, sync: sync ? { key: sync, setSeries: false } : undefined },
      legend: { live: true },
      hooks: {
        drawClear: [function (u) { shadeWindow(u, spec); shadeTail(u, spec); }],
        draw: [function (u) { overlay(u, spec, fig, rawIndex); }],
        setScale: [function (u, key) {
          if (key !== "x") return;
          var z = u.scales.x.min > shown[0] + 1e-9 || u.scales.x.max < shown[1] - 1e-9;
          if (z !== chart.zoomed) { chart.zoomed = z; u.redraw(true, true); }
          if (!spec.is_panel) fig.setAttribute("data-zoomed", z ? "1" : "0");
          (chart.linked || []).forEach(function (o) {
            if (o.u.scales.x.min !== u.scales.x.min || o.u.scales.x.max !== u.scales.x.max) o.u.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
          });
        }],
        setSeries: [function () { drawn(); }]
      }
    };
    var u = new uPlot(opts, data, box);
    chart.u = u;
    if (band) {  // the band's low edge is drawn with its high edge: one legend entry
      var rows = u.root.querySelectorAll(".u-legend .u-series");
      if (rows[rows.length - 1]) rows[rows.length - 1].style.display = "none";
    }
    function drawn() {
      if (spec.is_panel) return;
      fig.setAttribute("data-drawn", String(rawIndex.filter(function (i) { return u.series[i].show; }).length));
    }
    drawn();
    if (!spec.is_panel) {
      fig.setAttribute("data-zoomed", "0");
      fig.setAttribute("data-yscale", yscale);
      fig.setAttribute("data-right", String(right.length));
      fig.setAttribute("data-smoothed", String(curves.filter(function (c) { return !!c.smoothed; }).length));
      var tools = document.createElement("div"); tools.className = "tools";
      var reset = document.createElement("button"); reset.type = "button"; reset.textContent = "Reset zoom";
      reset.addEventListener("click", function () { u.setScale("x", { min: shown[0], max: shown[1] }); });
      tools.appendChild(reset); box.appendChild(tools);
    }
    window.addEventListener("resize", function () { u.setSize({ width: box.clientWidth || 800, height: opts.height }); });
    return chart;
  }

  function shadeTail(u, spec) {
    var t = spec.nonfinite_tail;
    if (!t) return;
    var c = u.ctx, b = u.bbox, dpr = devicePixelRatio, x0 = Math.max(b.left, px(u, t[0], "x")), x1 = b.left + b.width;
    if (x1 <= x0) return;
    c.save(); c.fillStyle = "rgba(214,39,40,0.12)"; c.fillRect(x0, b.top, x1 - x0, b.height);
    c.fillStyle = "#8b1a1a"; c.font = (11 * dpr) + "px system-ui, sans-serif"; c.textAlign = "left";
    var lines = ["NaN/Inf from step " + t[0], "to step " + t[1] + " (" + t[2] + " steps)"];
    var w = Math.max(c.measureText(lines[0]).width, c.measureText(lines[1]).width);
    var x = x0 + 4 * dpr + w > x1 ? x1 - w - 4 * dpr : x0 + 4 * dpr, y = b.top + b.height / 2;
    c.fillText(lines[0], x, y); c.fillText(lines[1], x, y + 13 * dpr);
    c.restore();
  }

  function px(u, v, key) { return u.valToPos(v, key, true); }

  function shadeWindow(u, spec) {
    if (!spec.window) return;
    var c = u.ctx, b = u.bbox, x0 = Math.max(b.left, px(u, spec.window[0], "x")), x1 = Math.min(b.left + b.width, px(u, spec.window[1], "x"));
    if (x1 <= x0) return;
    c.save(); c.fillStyle = "rgba(255,200,0,0.18)"; c.fillRect(x0, b.top, x1 - x0, b.height); c.restore();
  }

  // Labels placed left to right; a label that would overlap the one before it goes one row up.
  function placeLabels(c, items, left, right, bottom, rowHeight) {
    var rowsEnd = [];
    items.sort(function (a, b) { return a.x - b.x; }).forEach(function (it) {
      var w = c.measureText(it.text).width, row = 0;
      while (rowsEnd[row] !== undefined && rowsEnd[row] > it.x) row++;
      rowsEnd[row] = it.x + w + 8;
      var x = Math.min(it.x + 3, right - w);
      c.fillText(it.text, Math.max(left, x), bottom - 4 - row * rowHeight);
    });
    return rowsEnd.length;
  }

  function overlay(u, spec, fig, rawIndex) {
    var c = u.ctx, b = u.bbox, dpr = devicePixelRatio, l = b.left, r = b.left + b.width, top = b.top, bot = b.top + b.height;
    var inX = function (x) { return x >= l - 0.5 && x <= r + 0.5; };
    c.save();
    c.textAlign = "left"; c.textBaseline = "alphabetic";  // uPlot leaves its axes' alignment set
    c.font = (10 * dpr) + "px system-ui, sans-serif";
    c.beginPath(); c.rect(l, top, b.width, b.height); c.clip();
    // rule markers: dashed grey lines, labels that never overlap
    var labels = [];
    (spec.markers || []).forEach(function (m) {
      var x = px(u, m[0], "x");
      if (!inX(x)) return;
      c.strokeStyle = "#888"; c.lineWidth = dpr; c.setLineDash([4 * dpr, 3 * dpr]);
      c.beginPath(); c.moveTo(x, top); c.lineTo(x, bot); c.stroke();
      labels.push({ x: x, text: m[1] });
    });
    c.setLineDash([]); c.fillStyle = "#555";
    fig.setAttribute("data-marker-rows", String(placeLabels(c, labels, l, r, bot, 12 * dpr)));
    // the first bad step
    if (spec.first_bad_step !== null && spec.first_bad_step !== undefined) {
      var fx = px(u, spec.first_bad_step, "x");
      if (inX(fx)) {
        c.strokeStyle = "#c62828"; c.lineWidth = 1.5 * dpr; c.setLineDash([3 * dpr, 3 * dpr]);
        c.beginPath(); c.moveTo(fx, top); c.lineTo(fx, bot); c.stroke(); c.setLineDash([]);
        c.fillStyle = "#c62828"; c.font = (11 * dpr) + "px system-ui, sans-serif";
        var text = "first bad step " + spec.first_bad_step, w = c.measureText(text).width;
        c.fillText(text, fx + 4 * dpr + w > r ? fx - 4 * dpr - w : fx + 4 * dpr, top + 22 * dpr);
      }
    }
    c.restore();
    // non-finite points (red) and points beyond the y range (grey): triangles on the edge
    var ymin = u.scales.y.min, ymax = u.scales.y.max, bad = 0, off = 0;
    spec.curves.forEach(function (cv, ci) {
      if (!u.series[rawIndex[ci]].show) return;
      for (var i = 0; i < cv.steps.length; i++) {
        var v = cv.values[i], x = px(u, cv.steps[i], "x");
        if (!inX(x)) continue;
        if (typeof v !== "number") { triangle(c, x, top + 9 * dpr, false, "#d62728", dpr); bad++; }
        else if (v > ymax) { triangle(c, x, top, true, "#666", dpr); off++; }
        else if (v < ymin) { triangle(c, x, bot, false, "#666", dpr); off++; }
      }
    });
    if (spec.explosion && off) {  // the peak the range leaves out, said in words at the top
      var ex = spec.explosion, ev = num(ex[1]), text = (ev > 0 ? "\u2191 " : "\u2193 ") + fmt(ev) + " at step " + ex[0] + " (off scale)";
      c.save(); c.font = (11 * dpr) + "px system-ui, sans-serif"; c.fillStyle = "#555"; c.textAlign = "left";
      var ew = c.measureText(text).width, exx = Math.min(Math.max(px(u, ex[0], "x") - ew - 6 * dpr, l + 2 * dpr), r - ew - 2 * dpr);
      c.fillText(text, exx, ev > 0 ? top + 38 * dpr : bot - 24 * dpr); c.restore();
    }
    if (spec.is_panel) return;
    fig.setAttribute("data-nonfinite", String(bad));
    fig.setAttribute("data-offscale", String(off));
  }

  // a triangle with its tip at (x, tip), pointing up or down
  function triangle(c, x, tip, up, color, dpr) {
    var s = 5 * dpr, base = up ? tip + 1.8 * s : tip - 1.8 * s;
    c.fillStyle = color; c.beginPath();
    c.moveTo(x, tip); c.lineTo(x - s, base); c.lineTo(x + s, base);
    c.closePath(); c.fill();
  }

  var data = JSON.parse(document.getElementById("ta-data").textContent);
  data.charts.forEach(function (spec, i) {
    var fig = document.getElementById("chart-" + i);
    if (!fig || !spec.curves || !spec.curves.length) return;
    var boxes = fig.querySelectorAll(".plot"), sync = spec.panel ? "chart-" + i : null;
    var chart = build(fig, spec, boxes[0], sync);
    charts.push(chart);
    if (spec.panel && boxes[1] && spec.panel.curves && spec.panel.curves.length) {
      // the relative difference under the absolute values: same steps, zoomed together
      spec.panel.is_panel = true;
      chart.panel = build(fig, spec.panel, boxes[1], sync, chart);
      chart.linked = [chart.panel]; chart.panel.linked = [chart];
      chart.panel.u.setScale("x", { min: chart.u.scales.x.min, max: chart.u.scales.x.max });
      fig.setAttribute("data-panel", "1");
    }
  });
  window.trainauditCharts = charts;  // for tests and for the curious: each chart's uPlot instance is .u
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
