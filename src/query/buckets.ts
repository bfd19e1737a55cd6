/**
 * UTC calendar arithmetic for queries: request dates → milliseconds, and the
 * bucket layouts that trend and retention kernels count into. Sits between the
 * request schemas (which validate dates and bound bucket counts with it) and
 * the kernels (which map a segment's day to a bucket index with it).
 *
 * Layouts are plain numbers so that they cross to worker threads by structured
 * clone for a few bytes; labels are produced apart, on the thread that answers.
 */

import type { ZoneClock } from "./time-zone.js";

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

// ---------------------------------------------------------------------------
// Boundaries in a time zone (SPEC §7.1)

/**
 * Buckets as instants: bucket i holds [startsMs[i], startsMs[i + 1]), so
 * startsMs has one more entry than there are buckets and its last entry is the
 * end of the range. A bucket may be empty (a date the zone skipped). Kernels
 * place a row by binary search, whatever the zone did to the clocks.
 */
export interface Boundaries {
  startsMs: Float64Array;
  labels: string[];
}

/** Epoch day of a date already checked by isCalendarDate. */
export function epochDayOf(date: string): number {
  return epochDay(dateToMs(date));
}

/** [first instant of local day dateFrom, first instant of local day dateTo + 1). */
export function zonedRange(dateFrom: string, dateTo: string, clock: ZoneClock): { fromMs: number; toMsExclusive: number } {
  return { fromMs: clock.dayStartMs(epochDayOf(dateFrom)), toMsExclusive: clock.dayStartMs(epochDayOf(dateTo) + 1) };
}

/**
 * Trend buckets in the clock's zone. Day, week and month buckets are those of
 * the UTC layout (same count, same labels), each starting at the first instant
 * of its first local day. Hour buckets are walked: a new one starts at every
 * local hour and wherever the clocks go back, none for a skipped hour.
 * Undefined when there would be more than bucketsMax.
 */
export function zonedTrendBoundaries(dateFrom: string, dateTo: string, groupBy: GroupBy, clock: ZoneClock, bucketsMax: number): Boundaries | undefined {
  const fromDay = epochDayOf(dateFrom);
  const toDay = epochDayOf(dateTo);
  if (groupBy !== "hour") {
    const layout = trendLayout(dateFrom, dateTo, groupBy);
    if (layout.bucketCount > bucketsMax) return undefined;
    const startsMs = new Float64Array(layout.bucketCount + 1);
    for (let index = 0; index < layout.bucketCount; index++) {
      let day: number;
      if (groupBy === "day") day = fromDay + index;
      else if (groupBy === "week") day = layout.originDay + index * 7;
      else {
        const month = layout.originMonth + index;
        day = epochDay(new Date(0).setUTCFullYear(Math.floor(month / 12), month % 12, 1));
      }
      startsMs[index] = clock.dayStartMs(Math.max(fromDay, day));
    }
    startsMs[layout.bucketCount] = clock.dayStartMs(toDay + 1);
    return { startsMs, labels: trendBucketLabels(layout) };
  }
  const fromMs = clock.dayStartMs(fromDay);
  const toMsExclusive = clock.dayStartMs(toDay + 1);
  const starts: number[] = [];
  const labels: string[] = [];
  // One offset read per hour: the offset in force is carried along and read again only at the next hour.
  let timeMs = fromMs;
  let offsetMs = clock.offsetMs(fromMs);
  let label = "";
  const open = (startMs: number, localMs: number) => {
    label = hourLabelOf(localMs);
    starts.push(startMs);
    labels.push(label);
  };
  if (fromMs < toMsExclusive) open(fromMs, fromMs + offsetMs);
  while (timeMs < toMsExclusive) {
    if (starts.length > bucketsMax) return undefined;
    const nextHourMs = Math.min((Math.floor((timeMs + offsetMs) / hourMs) + 1) * hourMs - offsetMs, toMsExclusive);
    const nextOffsetMs = clock.offsetMs(nextHourMs);
    if (nextOffsetMs === offsetMs) {
      if (nextHourMs < toMsExclusive) open(nextHourMs, nextHourMs + offsetMs);
      timeMs = nextHourMs;
      continue;
    }
    // The clocks change before the next hour: a new bucket there when the local hour differs or the clocks went back.
    const transitionMs = clock.nextTransitionMs(timeMs, nextHourMs)!;
    const transitionOffsetMs = clock.offsetMs(transitionMs);
    if (transitionMs < toMsExclusive && (hourLabelOf(transitionMs + transitionOffsetMs) !== label || transitionOffsetMs < offsetMs)) open(transitionMs, transitionMs + transitionOffsetMs);
    timeMs = transitionMs;
    offsetMs = transitionOffsetMs;
  }
  if (starts.length > bucketsMax) return undefined;
  starts.push(toMsExclusive);
  return { startsMs: Float64Array.from(starts), labels };
}

/** `YYYY-MM-DD HH:00:00` of a local wall time given as ms since the epoch. */
function hourLabelOf(localMs: number): string {
  const date = new Date(localMs);
  return `${padded(date.getUTCFullYear(), 4)}-${padded(date.getUTCMonth() + 1, 2)}-${padded(date.getUTCDate(), 2)} ${padded(date.getUTCHours(), 2)}:00:00`;
}

/** Retention periods in the clock's zone: period p starts at the first instant of local day dateFrom + p·windowDays. */
export function zonedRetentionBoundaries(dateFrom: string, dateTo: string, windowDays: number, clock: ZoneClock): Boundaries {
  const layout = retentionLayout(dateFrom, dateTo, windowDays);
  const fromDay = epochDayOf(dateFrom);
  const startsMs = new Float64Array(layout.periodCount + 1);
  for (let period = 0; period < layout.periodCount; period++) startsMs[period] = clock.dayStartMs(fromDay + period * windowDays);
  startsMs[layout.periodCount] = clock.dayStartMs(epochDayOf(dateTo) + 1);
  return { startsMs, labels: retentionPeriodLabels(layout) };
}

/** The local days' starts of [dateFrom, dateTo], and the end of the last one; undefined past daysMax days. */
export function zonedDayStarts(dateFrom: string, dateTo: string, clock: ZoneClock, daysMax: number): Float64Array | undefined {
  const fromDay = epochDayOf(dateFrom);
  const dayCount = epochDayOf(dateTo) - fromDay + 1;
  if (dayCount > daysMax) return undefined;
  const startsMs = new Float64Array(dayCount + 1);
  for (let day = 0; day <= dayCount; day++) startsMs[day] = clock.dayStartMs(fromDay + day);
  return startsMs;
}

/** The bucket of an instant inside [startsMs[0], startsMs[last]): the last i with startsMs[i] <= timeMs. */
export function boundaryIndex(startsMs: Float64Array, timeMs: number): number {
  let low = 0;
  let high = startsMs.length - 1;
  while (low < high) {
    const middle = (low + high + 1) >>> 1;
    if (startsMs[middle] <= timeMs) low = middle;
    else high = middle - 1;
  }
  return low;
}
