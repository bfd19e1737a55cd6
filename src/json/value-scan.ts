/**
 * The value scan of the ingest body parser: checks one JSON value's syntax
 * and steps over it, iteratively (nesting is as deep as the body is long, so
 * a level costs one byte untracked). Tracked — for a property value that may
 * be printed — it also counts the arrays and objects JSON.parse would keep and
 * records, per object, how it prints (an ObjectPlan): as written, or by a
 * rewrite record of its kept members in printed order (key-order.ts decides
 * them). value-printer.ts prints from those plans.
 */
import { limits } from "../config/limits.js";
import { Byte, doubled, skipWhitespaceAt } from "./bytes.js";
import { syntaxError, type ByteScanner } from "./byte-scanner.js";
import { memberSlots, type KeyOrder } from "./key-order.js";

/** Each array or object prints as at least two bytes: a value holding more of them than this is never printed. */
export const printedContainersMax = Math.floor(limits.propertiesBytesMax / 2);

/**
 * How a tracked object prints, one Int32 per object (a 20 MiB body may hold
 * 600 k objects): the offset of its rewrite record in the arena (≥ 0), or one
 * of these states.
 */
export const enum ObjectPlan {
  /** Its printed members are its written ones. */
  AsWritten = -1,
  /** Only scalars: its kept members are found again when it is printed (printedOrder). */
  Deferred = -2,
  /** It prints longer than what is left of the budget. */
  TooLong = -3,
  /**
   * MembersRecorded − r (≤ this): its members are recorded as written at arena
   * record r (same layout as a rewrite record), to be ordered when printed.
   */
  MembersRecorded = -4,
}

/**
 * A rewrite record in the arena: offset just past the object's closing brace,
 * kept member count, then the key start and value start of each kept member
 * in printed order (the rest is found again when printed, which stops at the
 * properties limit).
 */
export const rewriteHeaderSlots = 2;
export const rewriteMemberSlots = 2;

const enum FrameKind {
  Array = 0,
  Object = 1,
}

export class ValueScan {
  // Scan stack, one slot per open container, reused across values and grown by doubling.
  // Only kinds are kept when a value is just syntax-checked; the rest when it is tracked.
  private frameKinds = new Uint8Array(64);
  /** The object slot of each open object. */
  private frameObjectSlots = new Int32Array(64);
  private frameContainers = new Int32Array(64);
  private frameMemberBases = new Int32Array(64);
  /** keyStart, keyEnd, valueStart of the member being read, per open object. */
  private frameKeys = new Int32Array(64 * 3);
  /** Finished members of open objects, memberSlots each. */
  private members = new Int32Array(64 * memberSlots);
  private memberTop = 0;
  // Every object of the tracked value, in the order they open (so by start offset):
  // its start and its plan.
  private objectStarts = new Int32Array(64);
  private objectPlans = new Int32Array(64);
  private objectCount = 0;
  rewriteArena = new Int32Array(256);
  private rewriteTop = 0;
  /** The most bytes a tracked value may print as (the properties' budget for any one value). */
  scanBudget = Number.POSITIVE_INFINITY;

  constructor(
    private readonly scanner: ByteScanner,
    private readonly keyOrder: KeyOrder,
  ) {}

  /** Drops every object recorded so far: the values scanned next are tracked from scratch. */
  forgetObjects(): void {
    this.objectCount = 0;
    this.rewriteTop = 0;
  }

  /**
   * Checks one value's syntax and moves past it. With `track`, also counts the
   * arrays and objects JSON.parse would keep (duplicate keys drop members) and
   * records each object's start, with what printing it will need (closeObject).
   * Iterative: nesting is as deep as the body is long, so a level costs one
   * byte untracked and a few words tracked.
   */
  scanValue(tracked: boolean): number {
    let track = tracked;
    const bytes = this.scanner.bytes;
    let depth = 0;
    let position = this.scanner.position;
    // Tracked objects and their rewrites are kept across values until the caller resets them.
    if (track) this.memberTop = 0;
    // Containers opened while no object is open can never be dropped by a duplicate key: once
    // more of them than a printed value may hold are seen, the value is too large, and the rest
    // is only syntax-checked (20 MiB of `[[[…` then costs a byte per level, not a tracked frame).
    let openObjects = 0;
    let keptForSure = 0;
    let tooManyContainers = false;
    for (;;) {
      // A value starts here.
      position = skipWhitespaceAt(bytes, position);
      let byte = bytes[position];
      let valueContainers = 0;
      if (byte === Byte.OpenBracket && !track && bytes[position + 1] === Byte.OpenBracket) {
        // A run of `[[[…` only syntax-checked, as the deepest bodies hold: a store per level.
        // The run's last bracket is read below like any other (it may open an empty array).
        let kinds = this.frameKinds;
        do {
          if (depth === kinds.length) kinds = this.frameKinds = doubled(kinds);
          kinds[depth++] = FrameKind.Array;
          position++;
        } while (bytes[position + 1] === Byte.OpenBracket);
      }
      if (byte === Byte.OpenBracket || byte === Byte.OpenBrace) {
        if (track) {
          if (openObjects === 0 && ++keptForSure > printedContainersMax) {
            track = false;
            tooManyContainers = true;
          }
          if (byte === Byte.OpenBrace) openObjects++;
        }
        this.pushFrame(depth, byte === Byte.OpenBracket ? FrameKind.Array : FrameKind.Object, position, track);
        depth++;
        position++;
        position = skipWhitespaceAt(bytes, position);
        if (bytes[position] !== (byte === Byte.OpenBracket ? Byte.CloseBracket : Byte.CloseBrace)) {
          if (byte === Byte.OpenBrace) position = this.scanKey(depth - 1, position, track);
          continue;
        }
        position++;
        depth--;
        if (track && byte === Byte.OpenBrace) openObjects--;
        valueContainers = 1;
      } else if (byte === Byte.Quote) {
        position = this.scanner.stringEnd(position);
      } else if (byte === Byte.LowerT || byte === Byte.LowerF || byte === Byte.LowerN) {
        this.scanner.position = position;
        this.scanner.literal(byte === Byte.LowerT ? "true" : byte === Byte.LowerF ? "false" : "null");
        position = this.scanner.position;
      } else {
        position = this.scanner.numberEnd(position);
      }
      // A value ended at `position`: hand it to its container, closing containers as they end.
      for (;;) {
        if (depth === 0) {
          this.scanner.position = position;
          return tooManyContainers ? printedContainersMax + 1 : valueContainers;
        }
        const frame = depth - 1;
        const isArray = this.frameKinds[frame] === FrameKind.Array;
        if (track) {
          if (isArray) this.frameContainers[frame] += valueContainers;
          else this.pushMember(frame, position, valueContainers);
        }
        position = skipWhitespaceAt(bytes, position);
        byte = bytes[position++];
        if (byte === Byte.Comma) {
          position = skipWhitespaceAt(bytes, position);
          if (!isArray) position = this.scanKey(frame, position, track);
          break;
        }
        if (byte !== (isArray ? Byte.CloseBracket : Byte.CloseBrace)) throw syntaxError;
        depth--;
        if (!track) {
          // Likewise a run of `]]]…`: a load and a compare per level.
          const kinds = this.frameKinds;
          while (depth > 0 && bytes[position] === Byte.CloseBracket && kinds[depth - 1] === FrameKind.Array) {
            depth--;
            position++;
          }
          continue;
        }
        if (isArray) {
          valueContainers = 1 + this.frameContainers[frame];
          continue;
        }
        openObjects--;
        valueContainers = 1 + this.closeObject(frame, position);
      }
    }
  }

  private pushFrame(depth: number, kind: FrameKind, start: number, track: boolean): void {
    if (depth === this.frameKinds.length) this.frameKinds = doubled(this.frameKinds);
    this.frameKinds[depth] = kind;
    if (!track) return;
    if (depth === this.frameObjectSlots.length) {
      this.frameObjectSlots = doubled(this.frameObjectSlots);
      this.frameContainers = doubled(this.frameContainers);
      this.frameMemberBases = doubled(this.frameMemberBases);
      this.frameKeys = doubled(this.frameKeys);
    }
    this.frameContainers[depth] = 0;
    this.frameMemberBases[depth] = this.memberTop;
    if (kind !== FrameKind.Object) return;
    if (this.objectCount === this.objectStarts.length) {
      this.objectStarts = doubled(this.objectStarts);
      this.objectPlans = doubled(this.objectPlans);
    }
    const slot = this.objectCount++;
    this.objectStarts[slot] = start;
    this.objectPlans[slot] = ObjectPlan.AsWritten;
    this.frameObjectSlots[depth] = slot;
  }

  /** Reads `"key"` and the Byte.Colon after it; the member's value starts at the returned offset. */
  private scanKey(frame: number, position: number, track: boolean): number {
    const bytes = this.scanner.bytes;
    if (bytes[position] !== Byte.Quote) throw syntaxError;
    const keyEnd = this.scanner.stringEnd(position);
    if (track) {
      this.frameKeys[frame * 3] = position;
      this.frameKeys[frame * 3 + 1] = keyEnd;
    }
    position = keyEnd;
    position = skipWhitespaceAt(bytes, position);
    if (bytes[position++] !== Byte.Colon) throw syntaxError;
    position = skipWhitespaceAt(bytes, position);
    if (track) this.frameKeys[frame * 3 + 2] = position;
    return position;
  }

  /**
   * Records a finished member of an open object on the member stack. An inner
   * object's members sit above its parent's and are popped when it closes, so
   * an object's members are contiguous when it closes.
   */
  private pushMember(frame: number, valueEnd: number, containers: number): void {
    if (this.memberTop + memberSlots > this.members.length) this.members = doubled(this.members);
    const members = this.members;
    const top = this.memberTop;
    members[top] = this.frameKeys[frame * 3];
    members[top + 1] = this.frameKeys[frame * 3 + 1];
    members[top + 2] = this.frameKeys[frame * 3 + 2];
    members[top + 3] = valueEnd;
    members[top + 4] = containers;
    this.memberTop = top + memberSlots;
  }

  /**
   * Pops a closing object's members and returns the arrays and objects its kept
   * members hold. JSON.parse keeps one member per key — the last value, at the
   * first position — and lists array-index keys first, ascending. Which members
   * print, and in what order, is worked out only if the object is printed
   * (printedOrder): many never are, since a member dropped by a duplicate key
   * or past the limit is not, and a 20 MiB body may hold 600 k objects.
   */
  private closeObject(frame: number, end: number): number {
    const base = this.frameMemberBases[frame];
    const top = this.memberTop;
    this.memberTop = base;
    const members = this.members;
    const count = (top - base) / memberSlots;
    if (count === 0) return 0;
    if (count === 1) return members[base + 4];
    let containers = 0;
    for (let at = base + 4; at < top; at += memberSlots) containers += members[at];
    const slot = this.frameObjectSlots[frame];
    if (containers === 0) {
      // Only scalars: none is kept whichever members are, and the members can be read again
      // cheaply when printed. The value itself (frame 0) is printed whenever its member is kept:
      // when it has too many keys to fit any budget it may get, that is known now, while its
      // members are at hand, rather than by reading them all again.
      const tooLong = frame === 0 && this.keyOrder.tooManyKeysToPrint(members, base, top, this.scanBudget);
      this.objectPlans[slot] = tooLong ? ObjectPlan.TooLong : ObjectPlan.Deferred;
      return 0;
    }
    // Values hold containers, which a duplicate key may drop: duplicates are found now (no
    // order needed), and the members are recorded as written, since reading them again
    // would read every nested value again, once per level.
    const record = this.reserveRewrite(slot, end, count);
    const arena = this.rewriteArena;
    // Written inline rather than by writeRewriteMember: this runs for every such object of a body.
    for (let at = base, slotAt = record + rewriteHeaderSlots; at < top; at += memberSlots, slotAt += rewriteMemberSlots) {
      arena[slotAt] = members[at];
      arena[slotAt + 1] = members[at + 2];
    }
    this.objectPlans[slot] = ObjectPlan.MembersRecorded - record;
    return this.keyOrder.keptContainerCount(members, base, top, containers);
  }

  /**
   * Records the object in `slot`, whose members are `members[base, top)`, in
   * the rewrite arena when its printed members differ from its written ones.
   */
  private recordPrintedOrder(slot: number, base: number, top: number, end: number): void {
    const keyOrder = this.keyOrder;
    if (!keyOrder.orderMembers(this.members, base, top)) return;
    const kept = keyOrder.keptCount;
    const record = this.reserveRewrite(slot, end, kept);
    for (let position = 0; position < kept; position++) this.writeRewriteMember(record, position, keyOrder.keptFirsts[position], keyOrder.keptLasts[position]);
  }

  /**
   * The arena record of the tracked object starting at `start`, AsWritten when it
   * prints as written, or TooLong when it prints longer than `budget`.
   */
  planOf(start: number, budget: number): number {
    let low = 0;
    let high = this.objectCount - 1;
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const middleStart = this.objectStarts[middle];
      if (middleStart === start) {
        const rewrite = this.objectPlans[middle];
        if (rewrite === ObjectPlan.Deferred) return this.printedOrder(middle, start, budget);
        if (rewrite <= ObjectPlan.MembersRecorded) return this.printedOrderOfRecorded(middle, ObjectPlan.MembersRecorded - rewrite, budget);
        return rewrite;
      }
      if (middleStart < start) low = middle + 1;
      else high = middle - 1;
    }
    return ObjectPlan.AsWritten;
  }

  /**
   * The rewrite record of the object of only scalars at `start` (tracked slot
   * `slot`) whose kept members closeObject left to be worked out when printed:
   * its members are read again (syntax was checked) and kept and ordered as
   * JSON.parse keeps them. Returns AsWritten when it prints as written, and
   * TooLong when it has so many distinct keys that it prints longer than
   * `budget` bytes.
   */
  private printedOrder(slot: number, start: number, budget: number): number {
    const bytes = this.scanner.bytes;
    this.memberTop = 0;
    let position = skipWhitespaceAt(bytes, start + 1);
    for (;;) {
      position = this.scanKey(0, position, true);
      const byte = bytes[position];
      let valueEnd: number;
      if (byte === Byte.Quote) valueEnd = this.scanner.stringEnd(position);
      else if (byte === Byte.LowerT || byte === Byte.LowerN) valueEnd = position + 4;
      else if (byte === Byte.LowerF) valueEnd = position + 5;
      else valueEnd = this.scanner.numberEnd(position);
      this.pushMember(0, valueEnd, 0);
      position = skipWhitespaceAt(bytes, valueEnd);
      // The scan found a Byte.Comma or the closing brace here.
      if (bytes[position++] === Byte.CloseBrace) break;
      position = skipWhitespaceAt(bytes, position);
    }
    this.objectPlans[slot] = ObjectPlan.AsWritten;
    const top = this.memberTop;
    this.memberTop = 0;
    if (this.keyOrder.tooManyKeysToPrint(this.members, 0, top, budget)) return ObjectPlan.TooLong;
    this.recordPrintedOrder(slot, 0, top, position);
    return this.objectPlans[slot];
  }

  /** As printedOrder, for an object holding containers, whose written members closeObject recorded at arena `record`. */
  private printedOrderOfRecorded(slot: number, record: number, budget: number): number {
    const end = this.rewriteArena[record];
    const count = this.rewriteArena[record + 1];
    while (count * memberSlots > this.members.length) this.members = doubled(this.members);
    const members = this.members;
    for (let member = 0; member < count; member++) {
      const at = member * memberSlots;
      const keyStart = this.rewriteArena[record + rewriteHeaderSlots + member * rewriteMemberSlots];
      members[at] = keyStart;
      members[at + 1] = this.scanner.stringEnd(keyStart);
      members[at + 2] = this.rewriteArena[record + rewriteHeaderSlots + member * rewriteMemberSlots + 1];
      // Value ends and containers are not needed to order the members.
      members[at + 3] = 0;
      members[at + 4] = 0;
    }
    const top = count * memberSlots;
    this.objectPlans[slot] = ObjectPlan.AsWritten;
    if (this.keyOrder.tooManyKeysToPrint(this.members, 0, top, budget)) return ObjectPlan.TooLong;
    this.recordPrintedOrder(slot, 0, top, end);
    return this.objectPlans[slot];
  }

  /** Starts an arena record for the object in `slot`; members are written by writeRewriteMember. */
  private reserveRewrite(slot: number, end: number, memberCount: number): number {
    const size = rewriteHeaderSlots + memberCount * rewriteMemberSlots;
    while (this.rewriteTop + size > this.rewriteArena.length) this.rewriteArena = doubled(this.rewriteArena);
    const record = this.rewriteTop;
    this.rewriteArena[record] = end;
    this.rewriteArena[record + 1] = memberCount;
    this.rewriteTop += size;
    this.objectPlans[slot] = record;
    return record;
  }

  /** Kept member `position` of a rewrite: the key of the member at `keyAt`, the value of the one at `valueAt`. */
  private writeRewriteMember(record: number, position: number, keyAt: number, valueAt: number): void {
    const arena = this.rewriteArena;
    const members = this.members;
    const at = record + rewriteHeaderSlots + position * rewriteMemberSlots;
    arena[at] = members[keyAt];
    arena[at + 1] = members[valueAt + 2];
  }

  /**
   * Scans the value at `start` tracked, alone (what earlier values recorded is
   * dropped), to be printed within `budget` bytes; returns its containers.
   */
  trackValue(start: number, budget: number): number {
    this.forgetObjects();
    this.scanner.position = start;
    this.scanBudget = budget;
    const containers = this.scanValue(true);
    this.scanBudget = Number.POSITIVE_INFINITY;
    return containers;
  }
}
