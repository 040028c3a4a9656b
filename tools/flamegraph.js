// flamme flame graph viewer: embedded by `flamme svg` (tools/flamegraph.c)
// at the end of the SVG, so every element already exists when it runs. It
// works in a standalone SVG and in an SVG inlined into an HTML page.
// Frame data lives in attributes of each <g> under #frames: s = first sample
// offset, n = samples, m = self samples, d = depth; the name is the first line
// of its <title>, or its fn attribute when --nameattr replaced the title. A
// frame with a --nameattr href is an <a> instead of a <g>: a plain click
// follows the link, Ctrl-click zooms (as flamegraph.pl). Names are only ever read from the DOM and written with
// textContent, never parsed as markup or code.
"use strict";
var flamme = {ready: false, frames: [], zoomed: null, term: null, ic: false};

function flamme_init() {
    var F = flamme;
    if (F.ready) return;
    F.ready = true;
    var root = document.getElementById("flamme");
    F.total = +root.getAttribute("data-total");
    F.xpad = +root.getAttribute("data-xpad");
    F.W = +root.getAttribute("data-w");
    F.cw = +root.getAttribute("data-fs") * +root.getAttribute("data-fw");
    F.countname = root.getAttribute("data-countname");
    F.nametype = root.getAttribute("data-nametype");
    F.eps = F.total * 1e-12;
    F.details = document.getElementById("details").firstChild;
    F.matched = document.getElementById("matched").firstChild;
    var gs = document.getElementById("frames").children;
    for (var i = 0; i < gs.length; i++) {
        var g = gs[i];
        var t = g.getElementsByTagName("title")[0].textContent;
        var nl = t.indexOf("\n");
        var fn = g.getAttribute("fn");
        var f = {g: g, i: i, s: +g.getAttribute("s"), n: +g.getAttribute("n"),
                 m: +g.getAttribute("m"), d: +g.getAttribute("d"),
                 name: fn !== null ? fn : nl < 0 ? t : t.substring(0, nl),
                 rect: g.getElementsByTagName("rect")[0], text: g.getElementsByTagName("text")[0]};
        f.fill = f.rect.getAttribute("fill");
        g.setAttribute("data-i", i);
        F.frames.push(f);
    }
    var fr = document.getElementById("frames");
    fr.addEventListener("click", function (e) {
        var f = flamme_frame_of(e.target);
        if (!f) return;
        if (f.g.localName === "a") {
            if (!e.ctrlKey) return;
            e.preventDefault();
        }
        flamme_zoom(f);
    });
    fr.addEventListener("mouseover", function (e) {
        var f = flamme_frame_of(e.target);
        if (f) F.details.nodeValue = flamme_describe(f);
    });
    fr.addEventListener("mouseout", function () { F.details.nodeValue = " "; });
    document.getElementById("unzoom").addEventListener("click", function () { flamme_unzoom(); });
    document.getElementById("search").addEventListener("click", function () {
        if (F.term !== null) flamme_reset_search(); else flamme_search_prompt();
    });
    document.getElementById("ignorecase").addEventListener("click", function () { flamme_toggle_ic(); });
    var th = document.getElementById("threads");
    if (th) th.addEventListener("click", function (e) {
        var s = e.target.getAttribute && e.target.getAttribute("s");
        if (s === null || s === undefined) { flamme_unzoom(); return; }
        for (var k = 0; k < F.frames.length; k++)
            if (F.frames[k].d === 1 && Math.abs(F.frames[k].s - (+s)) <= F.eps) { flamme_zoom(F.frames[k]); return; }
    });
    document.addEventListener("keydown", function (e) {
        if (e.key === "F3" || ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F"))) {
            e.preventDefault();
            flamme_search_prompt();
        } else if ((e.ctrlKey || e.metaKey) && (e.key === "i" || e.key === "I")) {
            e.preventDefault();
            flamme_toggle_ic();
        } else if (e.key === "Escape") {
            flamme_unzoom();
        }
    });
    // State from the URL: ?x=<first sample>&y=<depth>&s=<regex>
    var p = flamme_params();
    if (p.get("x") !== null && p.get("y") !== null) {
        var x = +p.get("x"), y = +p.get("y");
        for (var j = 0; j < F.frames.length; j++)
            if (F.frames[j].d === y && Math.abs(F.frames[j].s - x) <= F.eps) { flamme_zoom(F.frames[j]); break; }
    }
    if (p.get("s") !== null) flamme_search(p.get("s"));
}

function flamme_params() {
    try { return new URLSearchParams(window.location.search); }
    catch (e) { return {get: function () { return null; }}; }
}

function flamme_update_url() {
    var F = flamme;
    try {
        var p = new URLSearchParams(window.location.search);
        if (F.zoomed) { p.set("x", String(F.zoomed.s)); p.set("y", String(F.zoomed.d)); }
        else { p.delete("x"); p.delete("y"); }
        if (F.term !== null) p.set("s", F.term); else p.delete("s");
        var q = p.toString();
        history.replaceState(null, "", window.location.pathname + (q ? "?" + q : "") + window.location.hash);
    } catch (e) { /* file:// or sandboxed: state just stays out of the URL */ }
}

function flamme_frame_of(el) {
    while (el && el.parentNode && el.parentNode.id !== "frames") el = el.parentNode;
    if (!el || !el.getAttribute) return null;
    var i = el.getAttribute("data-i");
    return i === null ? null : flamme.frames[+i];
}

function flamme_fmt(v) {
    var s = (v === Math.floor(v)) ? String(v) : v.toFixed(2);
    var parts = s.split(".");
    parts[0] = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return parts.join(".");
}

function flamme_pct(a, b) { return b > 0 ? (100 * a / b).toFixed(2) : "0.00"; }

// The details line: samples, % of total, % of the zoomed frame, self time.
function flamme_describe(f) {
    var F = flamme;
    var s = F.nametype + " " + f.name + " (" + flamme_fmt(f.n) + " " + F.countname + ", " +
            flamme_pct(f.n, F.total) + "%";
    if (F.zoomed && F.zoomed !== f) s += ", " + flamme_pct(f.n, F.zoomed.n) + "% of zoom";
    s += "; self " + flamme_fmt(f.m) + ", " + flamme_pct(f.m, F.total) + "%)";
    return s;
}

function flamme_label(f, x, w) {
    f.text.setAttribute("x", (x + 3).toFixed(2));
    var fit = Math.floor((w - 3) / flamme.cw);
    var name = f.g.getAttribute("class") === "el" ? "\u2026" : f.name;
    var t = "";
    if (name.length <= fit) t = name;
    else if (fit >= 3) t = name.substring(0, fit - 2) + "..";
    f.text.textContent = t;
}

function flamme_place(f, x, w) {
    f.rect.setAttribute("x", x.toFixed(2));
    f.rect.setAttribute("width", w.toFixed(2));
    flamme_label(f, x, w);
}

// Zooms so that frame z spans the full width; its ancestors stay, faded.
function flamme_zoom(z) {
    var F = flamme, e = F.eps;
    F.zoomed = z;
    for (var i = 0; i < F.frames.length; i++) {
        var f = F.frames[i], g = f.g;
        if (f.d < z.d && f.s <= z.s + e && f.s + f.n >= z.s + z.n - e) {
            g.style.display = "";
            g.classList.add("parent");
            flamme_place(f, F.xpad, F.W);
        } else if (f.d >= z.d && f.s >= z.s - e && f.s + f.n <= z.s + z.n + e) {
            g.style.display = "";
            g.classList.remove("parent");
            flamme_place(f, F.xpad + (f.s - z.s) / z.n * F.W, f.n / z.n * F.W);
        } else {
            g.style.display = "none";
        }
    }
    document.getElementById("unzoom").classList.remove("hide");
    flamme_select_thread(z);
    flamme_update_url();
}

function flamme_unzoom() {
    var F = flamme;
    F.zoomed = null;
    for (var i = 0; i < F.frames.length; i++) {
        var f = F.frames[i];
        f.g.style.display = "";
        f.g.classList.remove("parent");
        flamme_place(f, F.xpad + f.s / F.total * F.W, f.n / F.total * F.W);
    }
    document.getElementById("unzoom").classList.add("hide");
    flamme_select_thread(null);
    flamme_update_url();
}

function flamme_select_thread(z) {
    var th = document.getElementById("threads");
    if (!th) return;
    var sel = th.children;
    for (var i = 0; i < sel.length; i++) {
        var s = sel[i].getAttribute("s");
        var on = z ? (s !== null && z.d >= 1 && Math.abs(+s - flamme_thread_start(z)) <= flamme.eps) : s === null;
        sel[i].classList.toggle("on", on);
    }
}

// First sample of the depth-1 frame (thread) that contains f.
function flamme_thread_start(f) {
    var F = flamme;
    for (var i = 0; i < F.frames.length; i++) {
        var t = F.frames[i];
        if (t.d === 1 && t.s <= f.s + F.eps && t.s + t.n >= f.s + f.n - F.eps) return t.s;
    }
    return -1;
}

function flamme_search_prompt() {
    var term = window.prompt("Enter a search term (regexp allowed, e.g. ^caml_)",
                             flamme.term === null ? "" : flamme.term);
    if (term !== null && term !== "") flamme_search(term);
}

function flamme_toggle_ic() {
    var F = flamme;
    F.ic = !F.ic;
    document.getElementById("ignorecase").setAttribute("style", F.ic ? "font-weight:bold" : "");
    if (F.term !== null) flamme_search(F.term);
}

function flamme_reset_search() {
    var F = flamme;
    F.term = null;
    for (var i = 0; i < F.frames.length; i++) F.frames[i].rect.setAttribute("fill", F.frames[i].fill);
    F.matched.nodeValue = " ";
    document.getElementById("search").firstChild.nodeValue = "Search";
    flamme_update_url();
}

// Highlights frames whose name matches the regexp term; "Matched: X%" is
// the share of all samples under the outermost matching frames, so nested
// matches are not counted twice. Returns that percentage (NaN: bad regexp).
function flamme_search(term) {
    var F = flamme, re;
    try { re = new RegExp(term, F.ic ? "i" : ""); }
    catch (e) { F.matched.nodeValue = "Bad regexp"; return NaN; }
    F.term = term;
    var hits = [];
    for (var i = 0; i < F.frames.length; i++) {
        var f = F.frames[i];
        if (f.g.getAttribute("class") !== "el" && re.test(f.name)) {
            f.rect.setAttribute("fill", "rgb(230,0,230)");
            hits.push(f);
        } else {
            f.rect.setAttribute("fill", f.fill);
        }
    }
    hits.sort(function (a, b) { return a.s - b.s || a.d - b.d; });
    var sum = 0, end = -Infinity;
    for (var k = 0; k < hits.length; k++) {
        if (hits[k].s >= end - F.eps) { sum += hits[k].n; end = hits[k].s + hits[k].n; }
    }
    var pct = F.total > 0 ? 100 * sum / F.total : 0;
    F.matched.nodeValue = "Matched: " + pct.toFixed(1) + "%";
    document.getElementById("search").firstChild.nodeValue = "Reset Search";
    flamme_update_url();
    return pct;
}

flamme_init();
