// quest console: live counts over one event stream, and the review page's keys.
// Plain JavaScript, no library; every page works without it except live updates.
(function () {
  'use strict';
  var root = document.documentElement;
  root.classList.add('js');

  // --- Live counts ---------------------------------------------------------------
  function apply(status) {
    var rows = document.querySelectorAll('[data-session-id="' + status.session_id + '"]');
    rows.forEach(function (row) {
      row.querySelectorAll('[data-count]').forEach(function (el) {
        var v = status[el.getAttribute('data-count')];
        if (v !== undefined && String(v) !== el.textContent) {
          el.textContent = String(v);
          el.classList.remove('bump');
          void el.offsetWidth;
          el.classList.add('bump');
        }
      });
      // The server works out the live figures (status.live); they are only written in here.
      var live = status.live || {};
      row.querySelectorAll('[data-bar]').forEach(function (bar) {
        (live.segments || []).forEach(function (seg) {
          var rect = bar.querySelector('[data-segment="' + seg.name + '"]');
          if (!rect) return;
          rect.setAttribute('x', seg.x.toFixed(4));
          rect.setAttribute('width', seg.width.toFixed(4));
          var title = rect.querySelector('title');
          if (title) title.textContent = seg.name + ': ' + seg.count;
        });
      });
      row.querySelectorAll('[data-percent]').forEach(function (el) { el.textContent = String(live.progress); });
      row.querySelectorAll('[data-eta]').forEach(function (el) { el.textContent = live.eta; });
      row.querySelectorAll('[data-backlog]').forEach(function (el) {
        el.hidden = !live.backlog;
        var words = el.querySelector('[data-backlog-text]');
        if (words && live.backlog) words.textContent = live.backlog;
      });
      row.querySelectorAll('[data-rate]').forEach(function (el) { el.textContent = live.rate; });
    });
  }

  function live() {
    if (!window.EventSource || !document.querySelector('[data-session-id] [data-count]')) return;
    var ids = [];
    document.querySelectorAll('[data-session-id]').forEach(function (el) {
      var id = el.getAttribute('data-session-id');
      if (ids.indexOf(id) < 0) ids.push(id);
    });
    var query = ids.map(function (id) { return 'session=' + encodeURIComponent(id); }).join('&');
    var stream = new EventSource('/ui/events?' + query);
    stream.addEventListener('ready', function () { root.setAttribute('data-live', 'on'); });
    stream.addEventListener('status', function (e) { apply(JSON.parse(e.data)); });
    stream.addEventListener('created', function (e) {
      var id = JSON.parse(e.data).session_id;
      var note = document.querySelector('[data-new-session]');
      if (note && ids.indexOf(id) < 0) note.hidden = false;
    });
    stream.addEventListener('signed_out', function () {
      stream.close();
      window.location.assign('/ui/login?next=' + encodeURIComponent(window.location.pathname + window.location.search));
    });
    stream.addEventListener('error', function () { root.setAttribute('data-live', 'off'); });
  }

  // --- Review keys ---------------------------------------------------------------
  function press(key) {
    var el = document.querySelector('[data-key="' + key + '"]');
    if (!el || el.disabled) return false;
    el.click();
    return true;
  }

  function review() {
    var current = document.querySelector('[data-review-current]');
    var rejectForm = document.getElementById('reject-form');
    var note = document.getElementById('reject-note');
    var keys = document.getElementById('keys');

    function openReject() {
      if (!rejectForm) return;
      rejectForm.classList.add('open');
      note.focus();
    }
    function closeReject() {
      if (!rejectForm) return;
      rejectForm.classList.remove('open');
      note.blur();
    }
    var opener = document.querySelector('[data-key="r"]');
    if (opener) opener.addEventListener('click', openReject);

    // One decision per page: a second key press while the first is sent does nothing.
    document.querySelectorAll('[data-decide] form').forEach(function (form) {
      form.addEventListener('submit', function (e) {
        if (form.getAttribute('data-sent')) { e.preventDefault(); return; }
        form.setAttribute('data-sent', '1');
        document.querySelectorAll('[data-decide] button').forEach(function (b) { b.disabled = true; });
      });
    });

    // A decision made with a key is held for the session's undo window (z).
    function held(form) {
      var input = form && form.querySelector('input[name="held"]');
      if (input) input.value = '1';
    }

    if (note) {
      note.addEventListener('keydown', function (e) {
        if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          if (note.value.trim() === '') { note.reportValidity(); return; }
          held(rejectForm);
          rejectForm.requestSubmit();
        } else if (e.key === 'Escape') {
          e.preventDefault();
          closeReject();
        }
      });
    }

    document.addEventListener('keydown', function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
      var t = e.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
      if (e.key === '?') {
        e.preventDefault();
        if (keys.open) keys.close(); else keys.showModal();
        return;
      }
      if (keys && keys.open) return;
      if (e.key === 'z') {
        if (press('z')) e.preventDefault();
        return;
      }
      if (!current) return;
      var handled = false;
      switch (e.key) {
        case 'a': held(document.querySelector('[data-form="approve"]')); handled = press('a'); break;
        case 'r': if (rejectForm) { openReject(); handled = true; } break;
        case 's': handled = press('s'); break;
        case 'j': handled = press('j'); break;
        case 'k': handled = press('k'); break;
        case 'Escape': closeReject(); break;
      }
      if (handled) e.preventDefault();
    });
  }

  // --- The review queue: the current item in view, and a search over keys and results ---
  function queue() {
    var list = document.querySelector('.queue-list');
    if (!list) return;
    var current = list.querySelector('li.current');
    // Within the list only: the page itself stays where it is (on a phone the queue is below).
    if (current) {
      var l = list.getBoundingClientRect(), c = current.getBoundingClientRect();
      if (c.top < l.top || c.bottom > l.bottom) list.scrollTop += c.top - l.top - (l.height - c.height) / 2;
    }
    var search = document.querySelector('[data-queue-search]');
    if (!search) return;
    search.addEventListener('input', function () {
      var words = search.value.toLowerCase().trim();
      list.querySelectorAll('li[data-search]').forEach(function (li) {
        li.hidden = words !== '' && li.getAttribute('data-search').indexOf(words) < 0;
      });
    });
  }

  // --- The undo notice: counts down, and goes when the decision is recorded ---
  function undo() {
    var form = document.querySelector('[data-held]');
    if (!form) return;
    var left = parseInt(form.getAttribute('data-seconds-left'), 10) || 0;
    var shown = form.querySelector('[data-countdown]');
    var timer = setInterval(function () {
      left -= 1;
      if (left > 0) { shown.textContent = String(left); return; }
      clearInterval(timer);
      form.remove();
    }, 1000);
  }

  function start() {
    live();
    queue();
    undo();
    if (document.getElementById('keys')) review();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
