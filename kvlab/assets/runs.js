(() => {
  const table = document.getElementById('kvlab-runs');
  if (!table) return;
  const body = table.tBodies[0], rows = () => [...body.rows];
  table.querySelectorAll('th').forEach((th, i) => {
    th.tabIndex = 0;
    const sort = () => {
      const dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
      table.querySelectorAll('th').forEach(h => h.removeAttribute('aria-sort'));
      th.setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
      const key = r => { const c = r.cells[i]; return c.dataset.v !== undefined ? c.dataset.v : c.textContent; };
      const num = rows().every(r => r.cells[i].dataset.v !== undefined);
      rows().sort((a, b) => { const x = key(a), y = key(b);
        if (num) { const p = x === '' ? Infinity : +x, q = y === '' ? Infinity : +y;
                   return p === q ? 0 : (p < q ? -dir : dir); }
        return dir * x.localeCompare(y); }).forEach(r => body.appendChild(r));
    };
    th.addEventListener('click', sort);
    th.addEventListener('keydown', e => { if (e.key === 'Enter') sort(); });
  });
  const filter = document.getElementById('kvlab-runs-filter'), count = document.getElementById('kvlab-runs-count');
  const apply = () => { const q = filter.value.trim().toLowerCase(); let shown = 0;
    rows().forEach(r => { const on = !q || r.textContent.toLowerCase().includes(q); r.hidden = !on; shown += on; });
    count.textContent = `${shown} of ${rows().length} runs`; };
  filter.addEventListener('input', apply);
  apply();
})();
