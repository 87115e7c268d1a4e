import { sql, type DatabasePool } from '../../db/pool.ts';
import { START, type GlobalPosition, type ReadAllOptions, type ReadAllPage, type RecordedEvent } from '../port.ts';
import { pageEvent, pageRow, toPosition } from './rows.ts';

/**
 * `readAll`: one page of the log in one round trip (`es_read_page`, see its migrations), with a
 * filtered read scanning at most `scanWindow` log entries before it returns a checkpoint.
 */
export function createReadPage(pool: DatabasePool, scanWindow: number) {
  async function readAll(opts: ReadAllOptions = {}): Promise<ReadAllPage> {
    const after = opts.after ?? START;
    const maxCount = opts.maxCount ?? 1_000;
    const types = opts.eventTypes ? sql.array([...opts.eventTypes], 'text') : null;
    const rows = await pool.any(sql.type(pageRow)`
      select * from es_read_page(${after.commit.toString()}::xid8, ${after.prepare.toString()}::int8, ${maxCount}, ${types}, ${scanWindow})
    `);
    const events: RecordedEvent[] = [];
    let windowEnd: GlobalPosition | undefined;
    let scanned: number | null = null;
    for (const row of rows) {
      const event = pageEvent(row);
      if (event) events.push(event);
      else {
        windowEnd = toPosition(row);
        scanned = row.revision;
      }
    }
    const last = events.at(-1)?.position;
    // Unfiltered: the page ends at its last event. Filtered: at the scanned window's end, unless
    // the page is full (then at its last event: more may match inside the window).
    const full = events.length === maxCount;
    const checkpoint = !windowEnd || (full && last) ? (last ?? after) : windowEnd;
    // At the horizon: a page that is not full, and, filtered, whose window was not full either
    // (a window-end row without its count comes from an older es_read_page: unknown). A filtered
    // read that scanned nothing returns no window row and is at the horizon too.
    const atHead = !full && (types === null || rows.length === 0 || (windowEnd !== undefined && scanned !== null && scanned < scanWindow));
    return { events, checkpoint, atHead };
  }

  return readAll;
}
