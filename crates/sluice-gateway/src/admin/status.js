// The status page: polls status.json (same origin) and renders it with text nodes only, so no
// value it reads (route names, paths, key hashes) can ever become markup.
'use strict';

(function () {
  const POLL_MS = 1000;
  const RATES = ['allowed', 'denied', 'shadow_denied'];
  // The previous poll: when it was read and each row's totals, for the rates.
  let previous = null;

  function byId(id) {
    return document.getElementById(id);
  }

  function cell(row, text, field) {
    const td = document.createElement('td');
    td.textContent = String(text);
    if (field) {
      td.setAttribute('data-field', field);
    }
    row.appendChild(td);
    return td;
  }

  function fill(tableId, rows, build) {
    const body = byId(tableId).tBodies[0];
    const fresh = document.createElement('tbody');
    for (const r of rows) {
      const tr = document.createElement('tr');
      build(tr, r);
      fresh.appendChild(tr);
    }
    body.replaceWith(fresh);
  }

  function rowKey(d) {
    return d.route + '\u0000' + d.policy;
  }

  function rate(d, field, now) {
    if (!previous || !previous.totals.has(rowKey(d))) {
      return '–';
    }
    const seconds = (now - previous.at) / 1000;
    if (!(seconds > 0)) {
      return '–';
    }
    const before = previous.totals.get(rowKey(d))[field];
    return (Math.max(0, d[field] - before) / seconds).toFixed(1);
  }

  function renderStore(store, inFlight, maxInFlight) {
    const dl = byId('store');
    const fresh = document.createElement('dl');
    fresh.id = 'store';
    const items = [
      ['kind', store.kind],
      ['ready', store.ready ? 'yes' : 'NO'],
      ['failing now', store.failing ? 'YES' : 'no'],
      ['breaker', store.breaker === undefined ? 'none' : store.breaker],
      ['store errors', store.errors],
      ['failure-mode answers', store.degraded],
      ['in flight', maxInFlight === undefined ? inFlight : inFlight + ' of ' + maxInFlight],
    ];
    for (const [name, value] of items) {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.textContent = String(value);
      dd.setAttribute('data-field', name.replace(/ /g, '-'));
      const bad = (name === 'ready' && !store.ready) || (name === 'failing now' && store.failing) ||
        (name === 'breaker' && store.breaker === 'open');
      if (bad) {
        dd.className = 'bad';
      }
      fresh.appendChild(dt);
      fresh.appendChild(dd);
    }
    dl.replaceWith(fresh);
  }

  // 3h 12m, 4m 10s, 35s: the two largest units.
  function span(seconds) {
    const units = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
    const parts = [];
    let left = Math.floor(seconds);
    for (const [unit, size] of units) {
      if (left >= size || (unit === 's' && parts.length === 0)) {
        parts.push(Math.floor(left / size) + unit);
        left %= size;
      }
      if (parts.length === 2) {
        break;
      }
    }
    return parts.join(' ');
  }

  function millis(ms) {
    if (ms === undefined) {
      return '–';
    }
    return ms >= 1000 ? (ms / 1000) + ' s' : ms + ' ms';
  }

  function renderReload(r) {
    const el = byId('reload');
    if (!r) {
      el.textContent = 'no reload since start';
      el.removeAttribute('class');
      return;
    }
    const at = new Date(r.at_unix * 1000).toLocaleString();
    el.textContent = 'last reload (' + r.of + '): ' + r.result + ' at ' + at + (r.error ? ': ' + r.error : '');
    if (r.result === 'ok') {
      el.removeAttribute('class');
    } else {
      el.className = 'bad';
    }
    el.setAttribute('data-result', r.result);
  }

  function limitText(l) {
    return l.policy + ' by ' + l.key + (l.cost === 1 ? '' : ' (cost ' + l.cost + ')');
  }

  function params(p) {
    const skip = new Set(['name', 'algorithm', 'shadow']);
    return Object.keys(p).filter((k) => !skip.has(k) && p[k] !== null)
      .map((k) => k + '=' + p[k]).join(', ');
  }

  function render(s, now) {
    byId('service').textContent = s.service;
    byId('version').textContent = 'v' + s.version;
    byId('uptime').textContent = 'up ' + span(s.uptime_seconds);
    renderReload(s.last_reload);
    renderStore(s.store, s.in_flight, s.max_in_flight);
    fill('decisions', s.decisions, (tr, d) => {
      tr.setAttribute('data-route', d.route);
      tr.setAttribute('data-policy', d.policy);
      cell(tr, d.route);
      cell(tr, d.policy);
      cell(tr, d.algorithm);
      for (const field of RATES) {
        cell(tr, d[field], field);
        cell(tr, rate(d, field, now), field + '_per_second');
      }
      cell(tr, d.error, 'error');
      cell(tr, d.allowed_degraded, 'allowed_degraded');
      if (d.denied > 0) {
        tr.className = 'denying';
      }
    });
    fill('top-denied', s.top_denied, (tr, k) => {
      tr.setAttribute('data-key', k.key_hash);
      cell(tr, k.key_hash, 'key_hash').className = 'hash';
      cell(tr, k.policy, 'policy');
      cell(tr, k.overcount > 0 ? k.denials + ' (≤' + k.overcount + ' over)' : k.denials, 'denials');
    });
    const targets = [];
    for (const u of s.upstreams || []) {
      for (const t of u.targets) {
        targets.push([u, t]);
      }
    }
    fill('upstreams', targets, (tr, [u, t]) => {
      tr.setAttribute('data-upstream', u.name);
      tr.setAttribute('data-target', t.target);
      cell(tr, u.name + ' (' + u.balance + (u.health_checked ? ', checked' : '') + ')');
      cell(tr, t.target, 'target');
      const state = t.back_in_seconds === undefined ? t.state : t.state + ', back in ' + span(t.back_in_seconds + 1);
      const stateCell = cell(tr, state, 'state');
      if (t.state !== 'up') {
        stateCell.className = 'bad';
      }
      cell(tr, t.waiting, 'waiting');
      cell(tr, t.responses, 'responses');
      cell(tr, t.failures, 'failures');
      cell(tr, t.ejections, 'ejections');
      cell(tr, millis(t.p50_ms_at_most), 'p50');
      cell(tr, millis(t.p99_ms_at_most), 'p99');
    });
    fill('routes', s.routes || [], (tr, r) => {
      tr.setAttribute('data-route-name', r.name);
      cell(tr, r.name);
      cell(tr, r.path);
      cell(tr, r.methods && r.methods.length ? r.methods.join(', ') : 'any');
      cell(tr, (r.limits || []).map(limitText).join('; '));
    });
    fill('policies', s.policies || [], (tr, p) => {
      tr.setAttribute('data-policy-name', p.name);
      cell(tr, p.name);
      cell(tr, p.algorithm);
      cell(tr, params(p));
      cell(tr, p.shadow ? 'yes' : 'no');
    });
    const totals = new Map();
    for (const d of s.decisions) {
      totals.set(rowKey(d), d);
    }
    previous = { at: now, totals };
  }

  function setState(text, ok) {
    const state = byId('state');
    state.textContent = text;
    state.className = ok ? 'state ok' : 'state bad';
  }

  async function poll() {
    try {
      const res = await fetch('status.json', { cache: 'no-store', credentials: 'same-origin' });
      if (!res.ok) {
        throw new Error('status.json answered ' + res.status);
      }
      const s = await res.json();
      render(s, performance.now());
      setState('live, updated ' + new Date().toLocaleTimeString(), true);
    } catch (e) {
      setState('not updating: ' + e.message, false);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
