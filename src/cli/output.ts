/** Renders command data as a table (for people) or JSON / YAML (for scripts), chosen by `-o`. */
import { type Command, Option } from 'commander';
import { stringify } from 'yaml';
import { InvalidInputError } from '../errors.ts';

export const outputFormats = ['table', 'json', 'yaml'] as const;
export type OutputFormat = (typeof outputFormats)[number];

/** The `-o, --output` option, shared by every command whose output is data. */
export function outputOption(defaultFormat: OutputFormat = 'table'): Option {
  return new Option('-o, --output <format>', 'output format').choices(outputFormats).default(defaultFormat);
}

/** A table column: its heading and how to read the cell from a row. */
export interface Column<Row> {
  header: string;
  value: (row: Row) => string | number | boolean | undefined | null;
}

/** Lays rows out in aligned columns, kubectl style (upper-case headings, two spaces apart). */
export function renderTable<Row>(rows: readonly Row[], columns: readonly Column<Row>[]): string {
  const cells = rows.map((row) => columns.map((c) => String(c.value(row) ?? '')));
  const headers = columns.map((c) => c.header.toUpperCase());
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] as string).length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (i === values.length - 1 ? v : v.padEnd(widths[i] as number)))
      .join('   ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n') + '\n';
}

/** Formats data for output: `json` and `yaml` print `data` as is; `table` prints `rows` in `columns`. */
export function formatOutput<Row>(
  format: string,
  data: unknown,
  table?: { rows: readonly Row[]; columns: readonly Column<Row>[] },
): string {
  switch (format) {
    case 'json':
      return JSON.stringify(data, null, 2) + '\n';
    case 'yaml':
      return stringify(data);
    case 'table':
      if (!table) return JSON.stringify(data, null, 2) + '\n';
      return renderTable(table.rows, table.columns);
    default:
      throw new InvalidInputError(
        `unknown output format "${format}": use one of ${outputFormats.join(', ')}`,
      );
  }
}

/** Writes command output through the command's configured output (standard output unless a test redirects it). */
export function writeOut(command: Command, text: string): void {
  const { writeOut: write } = command.configureOutput();
  if (write) write(text);
  else process.stdout.write(text);
}
