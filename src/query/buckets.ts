/**
 * UTC calendar arithmetic for queries: request dates → milliseconds, and the
 * bucket layouts that trend and retention kernels count into. Sits between the
 * request schemas (which validate dates and bound bucket counts with it) and
 * the kernels (which map a segment's day to a bucket index with it).
 *
 * Layouts are plain numbers so that they cross to worker threads by structured
 * clone for a few bytes; labels are produced apart, on the thread that answers.
 */

export const hourMs = 3_600_000;
export const dayMs = 86_400_000;

export type GroupBy = "hour" | "day" | "week" | "month";
export const groupByValues = ["hour", "day", "week", "month"] as const satisfies readonly GroupBy[];

const datePattern = /^(\d{4})-(\d{2})-(\d{2})$/;

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** True for `YYYY-MM-DD` naming a real day of the proleptic Gregorian calendar (2024-02-30 is not). */
export function isCalendarDate(text: string): boolean {
  const match = datePattern.exec(text);
  if (match === null) return false;
  const year = Number(match[1]);
  const month = Number(match[2]);
  const day = Number(match[3]);
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month);
}

/**
 * UTC midnight of a date already checked by isCalendarDate, in ms since the epoch.
 * setUTCFullYear rather than Date.UTC, because Date.UTC maps years 0–99 to 1900–1999.
 */
export function dateToMs(date: string): number {
  const year = Number(date.slice(0, 4));
  const month = Number(date.slice(5, 7));
  const day = Number(date.slice(8, 10));
  return new Date(0).setUTCFullYear(year, month - 1, day);
}

function padded(value: number, width: number): string {
  return String(value).padStart(width, "0");
}

/** `YYYY-MM-DD` of the UTC day holding timeMs. */
export function msToDate(timeMs: number): string {
  const date = new Date(timeMs);
  return `${padded(date.getUTCFullYear(), 4)}-${padded(date.getUTCMonth() + 1, 2)}-${padded(date.getUTCDate(), 2)}`;
}

/** Days since 1970-01-01 of the UTC day holding timeMs. */
function epochDay(timeMs: number): number {
  return Math.floor(timeMs / dayMs);
}

/** Monday = 0 … Sunday = 6; 1970-01-01 was a Thursday. */
function isoWeekday(day: number): number {
  return (((day + 3) % 7) + 7) % 7;
}

/** year × 12 + zero-based month of the UTC day holding timeMs: consecutive months are consecutive numbers. */
function monthNumber(timeMs: number): number {
  const date = new Date(timeMs);
  return date.getUTCFullYear() * 12 + date.getUTCMonth();
}

// ---------------------------------------------------------------------------
// Trend buckets

export interface TrendLayout {
  readonly groupBy: GroupBy;
  /** dateFrom 00:00 UTC. */
  readonly fromMs: number;
  /** dateTo + 1 day 00:00 UTC. */
  readonly toMsExclusive: number;
  readonly bucketCount: number;
  /** Epoch day of the first bucket's first day: dateFrom, or for week the Monday on or before it. */
  readonly originDay: number;
  /** For month: monthNumber of dateFrom. */
  readonly originMonth: number;
}

/**
 * How many buckets a trend over dateFrom..dateTo has, computed without building
 * them, so that the request schema can refuse a 3-million-bucket range cheaply.
 * Both dates must be valid and dateFrom <= dateTo.
 */
export function trendBucketCount(dateFrom: string, dateTo: string, groupBy: GroupBy): number {
  const fromMs = dateToMs(dateFrom);
  const toMs = dateToMs(dateTo);
  const fromDay = epochDay(fromMs);
  const toDay = epochDay(toMs);
  switch (groupBy) {
    case "hour":
      return (toDay - fromDay + 1) * 24;
    case "day":
      return toDay - fromDay + 1;
    case "week": {
      const originDay = fromDay - isoWeekday(fromDay);
      return Math.floor((toDay - originDay) / 7) + 1;
    }
    case "month":
      return monthNumber(toMs) - monthNumber(fromMs) + 1;
  }
}

export function trendLayout(dateFrom: string, dateTo: string, groupBy: GroupBy): TrendLayout {
  const fromMs = dateToMs(dateFrom);
  const toMsExclusive = dateToMs(dateTo) + dayMs;
  const fromDay = epochDay(fromMs);
  return {
    groupBy,
    fromMs,
    toMsExclusive,
    bucketCount: trendBucketCount(dateFrom, dateTo, groupBy),
    originDay: groupBy === "week" ? fromDay - isoWeekday(fromDay) : fromDay,
    originMonth: monthNumber(fromMs),
  };
}

/**
 * Index of the bucket holding the day that starts at dayStartMs (a UTC midnight
 * inside the layout's range). For hour, the index of that day's 00:00 bucket:
 * a row's bucket is then this + floor(timeOffsetMs / hourMs). Called once per
 * segment, never per row.
 */
export function trendBucketOfDay(layout: TrendLayout, dayStartMs: number): number {
  const day = epochDay(dayStartMs);
  switch (layout.groupBy) {
    case "hour":
      return (day - layout.originDay) * 24;
    case "day":
      return day - layout.originDay;
    case "week":
      return Math.floor((day - layout.originDay) / 7);
    case "month":
      return monthNumber(dayStartMs) - layout.originMonth;
  }
}

/** The `date` of every bucket, in order: SPEC §4 formats. */
export function trendBucketLabels(layout: TrendLayout): string[] {
  const labels = new Array<string>(layout.bucketCount);
  switch (layout.groupBy) {
    case "hour":
      for (let index = 0; index < layout.bucketCount; index++) {
        const startMs = layout.fromMs + index * hourMs;
        labels[index] = `${msToDate(startMs)} ${padded(index % 24, 2)}:00:00`;
      }
      break;
    case "day":
      for (let index = 0; index < layout.bucketCount; index++) labels[index] = msToDate(layout.fromMs + index * dayMs);
      break;
    case "week":
      for (let index = 0; index < layout.bucketCount; index++) labels[index] = msToDate((layout.originDay + index * 7) * dayMs);
      break;
    case "month":
      for (let index = 0; index < layout.bucketCount; index++) {
        const month = layout.originMonth + index;
        labels[index] = `${padded(Math.floor(month / 12), 4)}-${padded((month % 12) + 1, 2)}-01`;
      }
      break;
  }
  return labels;
}

// ---------------------------------------------------------------------------
// Retention periods

export interface RetentionLayout {
  readonly fromMs: number;
  readonly toMsExclusive: number;
  /** windowDays × 1 day: periods are whole days, so a day segment lies in exactly one period. */
  readonly periodMs: number;
  readonly periodCount: number;
}

/** Periods of windowDays days from dateFrom; the last one is cut at the end of dateTo. */
export function retentionPeriodCount(dateFrom: string, dateTo: string, windowDays: number): number {
  const dayCount = epochDay(dateToMs(dateTo)) - epochDay(dateToMs(dateFrom)) + 1;
  return Math.ceil(dayCount / windowDays);
}

export function retentionLayout(dateFrom: string, dateTo: string, windowDays: number): RetentionLayout {
  return {
    fromMs: dateToMs(dateFrom),
    toMsExclusive: dateToMs(dateTo) + dayMs,
    periodMs: windowDays * dayMs,
    periodCount: retentionPeriodCount(dateFrom, dateTo, windowDays),
  };
}

/** The `cohortDate` of every period: its first day. */
export function retentionPeriodLabels(layout: RetentionLayout): string[] {
  const labels = new Array<string>(layout.periodCount);
  for (let period = 0; period < layout.periodCount; period++) labels[period] = msToDate(layout.fromMs + period * layout.periodMs);
  return labels;
}
