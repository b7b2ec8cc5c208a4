/* SPDX-License-Identifier: BSL-1.0 */
/*
 * model/chime.pml: a SPIN model of chime's timer slot protocol.
 *
 * What it is: the slot's state word (runtime/timer_state.hpp) and every
 * party that changes it, as Promela processes whose steps are the code's
 * atomic operations: producers (schedule, cancel, try_cancel,
 * cancel_and_wait, reschedule), the wheel thread (filing, claiming, zombie
 * reclaim and sweep, closing a lane, shutdown's stop), workers and a lane's
 * thread (B1, F1-F4; a reschedule on the lane's thread that takes a run
 * back from its ready queue, R4, and the stale records it leaves there),
 * chime::Timer's handle (runtime/timer.cpp) and the wake-up handshake
 * (P1/P2). docs/model-check.md maps every transition to
 * the code, and lists the properties, the configurations and the seeded
 * mutations; check.sh runs them.
 *
 * Granularity: one Promela step per atomic memory operation of the code (a
 * load, a store, a CAS, an exchange), with the local computation that
 * follows it and the ghost bookkeeping folded into the same step. Every
 * transition is commented with the function that makes it and its tag, as
 * in the code: (S1), (C1), ... are the comments at the exact lines of
 * runtime/ (line numbers move; the tags do not).
 *
 * SPIN explores every interleaving of these steps under sequential
 * consistency: it checks the protocol's logic, not the memory orders. The
 * seq_cst fences P1/P2 are no-ops here; a missing fence is modelled as the
 * reordering it would allow (mutations 6 and 7).
 *
 * Selected with the preprocessor: -DCONFIG=n (the scenario, below) and
 * -DMUT=n (one seeded protocol bug, 0 = none; docs/model-check.md).
 */

#ifndef CONFIG
#define CONFIG 1
#endif
#ifndef MUT
#define MUT 0
#endif

/* ------------------------------------------------------------------------
 * Configurations (bounded: 2-3 producers, 1-3 slots, one periodic timer).
 * Each is small enough to be explored exhaustively; together they cover
 * every transition of docs/state-machine.md except take_back (X1 on an
 * ADD that could not be posted: out of memory).
 *  1 cancel       : P0 schedules t1, then t2 (which may reuse t1's slot);
 *                   P1 cancels t1 (cancel, or cancel_and_wait); a worker;
 *                   shutdown after them. Cancel vs filing (A1), claim (W1)
 *                   and start (B1); K1 and the canceller's free; zombies;
 *                   a stale id on a reused slot; F1 and WB.
 *  2 reschedule   : P0 schedules t1; P1 cancels it; P2 reschedules it later
 *                   or earlier (a RESCHEDULE); a worker; shutdown after
 *                   them. R1/R2 vs W1 (the version), C2/R3, deferred ADDs.
 *  3 shutdown     : P0 schedules t1; P1 cancels it (cancel, or
 *                   cancel_and_wait, or not); shutdown at any moment;
 *                   workers = 0.
 *                   withdraw_posted, X1, a zombie freed by the sweep.
 *  4 periodic     : P0 schedules a periodic t1; P1 cancels it (cancel, or
 *                   cancel_and_wait); a worker; shutdown after them,
 *                   cancel_pending or fire_pending (drain_all, F3). C3, F2,
 *                   F4, the REARM, WB on RunningCancelled.
 *  5 inline       : configuration 4 with workers = 0: the wheel thread runs
 *                   the callbacks and files the re-arm itself (F2 with A1).
 *  6 timer_every  : a chime::Timer armed with arm_every by a user thread
 *                   (S0 and its ADD, deferred by the wheel while Writing,
 *                   then S1), re-armed (a one-shot) from its own callback,
 *                   then destroyed (disarm_and_wait); a worker; shutdown
 *                   after.
 *  7 timer_rearm  : a chime::Timer armed with arm_at, armed again by the
 *                   user while it may be pending, running or done (the
 *                   reschedule fast path; else the new arm reserved, S0,
 *                   then try_cancel, then S1 or, when the run started, the
 *                   reservation withdrawn and the arm deferred to the end
 *                   of the run), then destroyed.
 *  8 lane         : a lane's thread schedules a periodic lane timer, runs
 *                   its ready queue, and destroys the lane (L1, L2, L3); P1
 *                   cancels the timer (or not); shutdown after them.
 *  9 lane_shutdown: the same lane's thread, and shutdown at any moment,
 *                   either mode (X2, the runs_active Dekker pair, final runs
 *                   of a lane after shutdown).
 * 10 wakeup       : two producers schedule three timers due at different
 *                   times while the wheel sleeps with a bound (its earliest
 *                   alarm's, or none); two may race for one sleep's
 *                   wake-up; workers = 0; shutdown after them. P1/P2.
 * 11 lane_resched : a lane's thread schedules a one-shot lane timer,
 *                   reschedules it on its thread (Lane::reschedule_at:
 *                   R1/R2 while pending, R4 once its run is in the ready
 *                   queue), runs its ready queue 0 to 2 times, destroys the
 *                   lane; P1 cancels it, waits for it, or not; shutdown
 *                   after them. R4 vs C4 and C2 (R3 frees), the stale
 *                   record in run() and in close_lane's L3, the ADD vs the
 *                   lane's close (L1).
 * 12 lane_resched_shutdown: the same lane's thread; shutdown at any moment,
 *                   either mode: R4's LaneRunsHold (the runs_active Dekker
 *                   pair) vs the sweep (X1, X2) and the final runs.
 * ---------------------------------------------------------------------- */
#if CONFIG == 1
#define NSLOT 2
#define NT 2
#define NPROD 2
#define NWORK 1
#define NPROCS 5
#define SHUTDOWN_WHEN (nfin == 2)
#elif CONFIG == 2
#define NSLOT 1
#define NT 1
#define NPROD 3
#define NWORK 1
#define NPROCS 6
#define SHUTDOWN_WHEN (nfin == 3)
#elif CONFIG == 3
#define NSLOT 1
#define NT 1
#define NPROD 2
#define NWORK 0
#define NPROCS 4
#define SHUTDOWN_WHEN true
#elif CONFIG == 4 || CONFIG == 5
#define NSLOT 1
#define NT 1
#define NPROD 2
#if CONFIG == 4
#define NWORK 1
#define NPROCS 5
#else
#define NWORK 0
#define NPROCS 4
#endif
#define SHUTDOWN_WHEN (nfin == 2)
#define SHUTDOWN_MODES 1
#elif CONFIG == 6 || CONFIG == 7
#define NSLOT 3
#define NT 4
#define NPROD 1
#define NWORK 1
#define NPROCS 4
#define HAS_TIMER 1
#define SHUTDOWN_WHEN (nfin == 1)
#define MAXT 2
#elif CONFIG == 8
#define NSLOT 1
#define NT 1
#define NPROD 2
#define NWORK 0
#define NPROCS 4
#define HAS_LANE 1
#define SHUTDOWN_WHEN (nfin == 2)
#define MAXT 2
#elif CONFIG == 9
#define NSLOT 1
#define NT 1
#define NPROD 1
#define NWORK 0
#define NPROCS 3
#define HAS_LANE 1
#define SHUTDOWN_MODES 1
#define SHUTDOWN_WHEN true
#define MAXT 2
#elif CONFIG == 11
#define NSLOT 1
#define NT 1
#define NPROD 2
#define NWORK 0
#define NPROCS 4
#define HAS_LANE 1
#define SHUTDOWN_WHEN (nfin == 2)
#define MAXT 2
#elif CONFIG == 12
#define NSLOT 1
#define NT 1
#define NPROD 1
#define NWORK 0
#define NPROCS 3
#define HAS_LANE 1
#define SHUTDOWN_MODES 1
#define SHUTDOWN_WHEN true
#define MAXT 2
#elif CONFIG == 10
#define NSLOT 3
#define NT 3
#define NPROD 2
#define NWORK 0
#define NPROCS 4
#define SHUTDOWN_WHEN (nfin == 2)
#define MAXT 1          /* the timers due 2 stay filed: the wheel sleeps with their bound */
#endif

#ifndef MAXT
#define MAXT 3          /* the clock runs 0..MAXT; a due of MAXT+1 never comes */
#endif
#define PPQ 5           /* commands one thread posts in one execution, at most (asserted) */

/* The command sub-queue of each posting thread (moodycamel's per-producer
 * queues: FIFO per poster, any order across posters): producers
 * 0..NPROD-1, then the workers (and the Timer's trampoline), shutdown, and
 * the lane's thread. */
#define QW (NPROD)
#define QS (NPROD + 1)
#define QL (NPROD + 2)
#define NQ (NPROD + 3)
#define NCMD (NQ * PPQ)  /* command ids: PPQ per posting thread */

/* ------------------------------------------------------------------------
 * The state word (timer_state.hpp, StateWord), scaled down:
 *   [ generation : 3 ][ version : 2 ][ periodic : 1 ][ waiter : 1 ][ filed : 1 ][ state : 4 ]
 * The generation wraps 7 -> 1 (0 is never issued), the version mod 4: no
 * configuration reuses a slot 7 times, nor bumps a version 4 times while
 * the wheel holds one word, so neither wraps onto a value still compared.
 * ---------------------------------------------------------------------- */
#define FREE 0
#define PENDING 1
#define WRITING 2
#define CANCELLING 3
#define HANDED 4
#define RUNNING 5
#define FIRED 6
#define CANCELLED 7
#define RCANCELLED 8

#define SMASK 15
#define FILEDB 16
#define WAITERB 32
#define PERB 64
#define VMASK 384
#define ST(w) ((w) & SMASK)
#define ISFILED(w) (((w) & FILEDB) != 0)
#define HASW(w) (((w) & WAITERB) != 0)
#define ISPER(w) (((w) & PERB) != 0)
#define GEN(w) (((w) >> 9) & 7)
#define VER(w) (((w) >> 7) & 3)
#define MAKE(g, s, p) (((g) << 9) | ((p) -> PERB : 0) | (s))
/* StateWord::with_state: state s, the waiter bit cleared, the rest kept */
#define WITH_STATE(w, s) (((w) & ~(SMASK | WAITERB)) | (s))
/* StateWord::claimed (W1): Handed, the filed bit cleared */
#define CLAIMED(w) (WITH_STATE(w, HANDED) & ~FILEDB)
/* StateWord::bumped: version + 1, state s, waiter cleared, filed kept */
#define BUMPED(w, s) (((w) & ~(SMASK | WAITERB | VMASK)) | (((((w) >> 7) + 1) & 3) << 7) | (s))
#define NEXTGEN(w) ((GEN(w) == 7) -> 1 : GEN(w) + 1)
#define RIP(w) (ST(w) == RUNNING || ST(w) == RCANCELLED)
/* the real word's low 32 bits (the futex): everything but the generation */
#define LOW(w) ((w) & 511)
#define SETTLED(w) (ST(w) != WRITING && ST(w) != CANCELLING)

/* Commands (command_queue.hpp), packed: kind, slot, generation, command id */
#define ADD 1
#define REARM 2
#define RESCHED 3
#define STOP 4
#define CLOSE 5
#define CMD(kind, s, g, c) (((kind) << 10) | ((s) << 8) | ((g) << 5) | (c))
#define CMD_KIND(m) (((m) >> 10) & 7)
#define CMD_SLOT(m) (((m) >> 8) & 3)
#define CMD_GEN(m) (((m) >> 5) & 7)
#define CMD_ID(m) ((m) & 31)
/* Dispatch records (dispatch.hpp), packed: slot, version (Dispatch::version,
 * the word's at the claim), generation, timer, flags. A run holds the
 * record's flags in rfl, and its version in rfl's bits 4-5 (RFL_V). */
#define F_DRAINED 1
#define F_KEEPDUE 2
#define F_FINAL 4
#define F_STOP 8
#define F_GSTALE 64     /* ghost, in rfl only: the record's run was taken back (R4) */
#define REC(s, g, v, t, fl) (((s) << 12) | ((v) << 10) | ((g) << 7) | ((t) << 4) | (fl))
#define REC_SLOT(m) (((m) >> 12) & 3)
#define REC_V(m) (((m) >> 10) & 3)
#define RFL_V(f) (((f) >> 4) & 3)
#define REC_GEN(m) (((m) >> 7) & 7)
#define REC_T(m) (((m) >> 4) & 7)
#define REC_FL(m) ((m) & 15)
/* Where a run happens (runner.hpp, Runner::Place) */
#define AT_WORKER 0
#define AT_WHEEL 1
#define AT_LANE 2
/* Cancel outcomes (producer_ops.cpp, CancelOutcome); 0: not decided yet */
#define O_WON 1
#define O_STOPPED_LATER 2
#define O_RUNNING 3
#define O_DONE 4
#define O_UNKNOWN 5

#define INF 15          /* the wheel's bound with no alarm: INT64_MAX */
#define MINB 0          /* INT64_MIN: awake, or this sleep's wake-up was taken */

/* ------------------------------------------------------------------------
 * Shared state of the real program
 * ---------------------------------------------------------------------- */
short word[NSLOT];      /* TimerSlot::word */
byte due[NSLOT];        /* TimerSlot::due_ns */
bool task[NSLOT];       /* TimerSlot::task is non-empty */
bool s_lane[NSLOT];     /* TimerSlot::lane != nullptr */
byte s_lgen[NSLOT];     /* TimerSlot::lane_generation */
/* the wheel thread's own (WheelThreadState; shutdown's once it has joined
 * it): `local`, SPIN's mark for globals only one process writes (others
 * only read them in ghost assertions), so that partial order reduction
 * treats the wheel's scans of them as private */
local bool in_wheel[NSLOT];   /* the slot has an alarm in the wheel */
local byte alarm_at[NSLOT];
local bool overdue[NSLOT];    /* on the overdue list */
local short dfr[NSLOT];       /* deferred_adds: the ADD/REARM met Writing; 0: none */
local byte now;               /* the wheel's time */

chan q[NQ] = [3] of { short };   /* seam.commands, one sub-queue per poster */
byte qlen;              /* seam.commands.size_approx() (exact here) */
chan handoff = [NSLOT + 1] of { short }; /* pool_.handoff (runs, and the stop record) */
chan batch = [NSLOT] of { short };   /* wt().dispatch_batch, run inline with workers = 0 */

byte bound = MINB;      /* seam.wake_if_due_before_ns */
bool wbumped;           /* seam.wake's futex word changed since the sleeper's prepare() */
bool wsleep;            /* the wheel thread is inside futex_wait */
bool stopped;           /* stopped_ */
bool cancel_requested;  /* cancel_requested_: shutdown(cancel_pending) was called */
bool wheel_exited;      /* seam.exited (and the thread joinable) */
byte workers_exited;
bool shutdown_done;     /* shutdown_done_ */
byte fw[NPROD];         /* threads in futex_wait_low_half: slot + 1; 0: not asleep */
byte mode;              /* the shutdown mode: 0 cancel_pending, 1 fire_pending */

#ifdef HAS_LANE
chan ready = [NSLOT + 1] of { short };   /* LaneCore::ready */
byte lane_gen = 1;      /* LaneCore::generation */
byte runs_active;       /* LaneCore::runs_active */
bool close_served;      /* the close_lane request's completion */
bool after_stop;        /* run_lane's local, kept here: one lane thread */
#endif

/* ------------------------------------------------------------------------
 * Ghost state: what the properties are stated over. Timers are numbered
 * 1..NT in the order their schedule began; an instance of a timer is one
 * arm, from S1 (or F2) to its run's start (B1) or the cancel of it.
 * ---------------------------------------------------------------------- */
byte nt;                  /* timers begun */
byte t_slot[NT + 1];
byte t_gen[NT + 1];
byte t_pub[NT + 1];       /* 0: in schedule; 1: its id returned; 2: schedule threw */
bool undecided[NT + 1];   /* the current instance is neither started nor cancelled */
bool cancel_true[NT + 1]; /* a cancel of it returned true (C1, C2, C3, C4) */
byte nstart[NT + 1];      /* its callback's starts (B1) */
byte cstart[NT + 1];      /* nstart when the cancel returned true */
bool in_cb[NT + 1];       /* its callback is running */
byte arm_of[NSLOT];       /* the timer the slot holds */
local byte fil_t[NSLOT];        /* the timer the wheel filed in the slot */
bool inuse[NSLOT];        /* allocated (not on the free list) */
bool abandoned[NSLOT];    /* Pending at shutdown's sweep (X1): stays with the slab */
byte held[NSLOT];         /* dispatch records of the slot in flight */
/* the wheel is owed an ADD or REARM for the slot's timer: set at S1 (the
 * ADD follows), at the post of S0's ADD, of a REARM and of R4's ADD;
 * cleared when A1 files it. A Pending word that is not filed always has
 * one owed, so the wheel never forgets a timer: asserted at the shutdown
 * sweep (X1). */
bool owed[NSLOT];
/* a zombie's word: the Cancelled word with the filed bit that K1 or R3
 * published on a filed timer, while the wheel thread (or shutdown's sweep)
 * owes its free; 0: none. The free clears the bit with a plain store
 * (reclaim, the sweep), which is right only if nothing else writes the
 * word meanwhile: the monitor ZombieWatch asserts the word stays this one. */
short zw[NSLOT];
#define ZOMBIE(s, zword) if :: ISFILED(zword) -> zw[s] = (zword) :: else fi
#ifdef HAS_LANE
/* records of the slot in the lane's ready queue whose run was taken back
 * (R4). The queue is FIFO and a slot's live record is queued after its
 * stale ones, so a dequeued record is stale iff the count is not 0 */
byte nstale[NSLOT];
#define STALE_GHOST if :: nstale[rs] > 0 -> nstale[rs]--; rfl = rfl | F_GSTALE :: else fi
#endif
byte nfin;                /* processes finished */
/* the wake-up: every command posted (its id: its poster's sub-queue and
 * how many that thread posted before, so an id does not depend on the
 * interleaving), whether still queued, its due, whether its poster has
 * made its wake-up decision; wakers between the bound's CAS and the wake */
bool cq[NCMD + 1];
bool cdone[NCMD + 1];
byte cdue[NCMD + 1];
byte wakers;
byte sbound = MINB;       /* the bound the wheel published for this sleep */

/* A party acts on the slot's fields as timer t's: the slot must still be
 * t's, not freed nor reused ("never reused while an id can reach it"). */
#define OWN(s, t) assert(inuse[s] && arm_of[s] == (t))
/* The one decision of an instance: its run starts, or it is cancelled. */
#define DECIDE(t) assert(undecided[t]); undecided[t] = 0

/* Freeing a slot (RetiredSlots::add, free_unfiled, slab_.release):
 * exactly once, by the party holding the timer, with no alarm, no dispatch
 * record and no task left, in a terminal state. */
#define FREE_SLOT(s, t) \
  assert(inuse[s]); assert(arm_of[s] == (t)); assert(!task[s]); \
  assert(!in_wheel[s] && !overdue[s]); assert(held[s] == 0); \
  assert(ST(word[s]) == FIRED || ST(word[s]) == CANCELLED); \
  inuse[s] = 0

/* TimerSlab::allocate: a free slot, any (the slab reuses the latest freed;
 * any order is a superset) */
inline alloc(s) {
  if
  :: !inuse[0] && !abandoned[0] -> s = 0
#if NSLOT > 1
  :: !inuse[1] && !abandoned[1] -> s = 1
#endif
#if NSLOT > 2
  :: !inuse[2] && !abandoned[2] -> s = 2
#endif
  :: else -> assert(false)   /* the configuration has too few slots */
  fi;
  inuse[s] = 1
}

/* ------------------------------------------------------------------------
 * The command queue and the wake-up (P1/P2, producer_ops.cpp and
 * wheel_thread.cpp sleep())
 * ---------------------------------------------------------------------- */
/* seam.commands.try_push / push_retrying */
#define POST(qi, kind, psl, pg, pdue) \
  np++; assert(np <= PPQ); cid = (qi) * PPQ + np; \
  cdue[cid] = pdue; cq[cid] = 1; cdone[cid] = 0; \
  q[qi]!CMD(kind, psl, pg, cid); qlen++

/* seam.wake.wake(): the futex word's fetch_add, then FUTEX_WAKE */
inline wake_unconditional() {
  atomic { wbumped = 1; cdone[cid] = 1 };
  atomic { if :: wsleep -> wsleep = 0 :: else fi; cid = 0 }
}

/* wake_after_fence (command_poster.cpp), after the (P1) fence: load the
 * bound (LOAD_BOUND, folded into the caller's step); if the due is before
 * it, CAS it to INT64_MIN and wake. MUT 6 loads it before the post: the
 * store-load reordering a missing P1 fence allows. b != 0 afterwards iff a
 * wake-up is needed (every due is >= 0, so due < b means b >= 1). */
#define NEED_WAKE(pdue) if :: (pdue) < b -> skip :: else -> cdone[cid] = 1; b = 0; cid = 0 fi
#define LOAD_BOUND(pdue) b = bound; NEED_WAKE(pdue)
inline wake_after_fence() {
  if
  :: b != 0 ->
     atomic {                                    /* compare_exchange_strong(bound, INT64_MIN) */
       if
       :: bound == b -> bound = MINB; wakers++; ok = 1
       :: else -> ok = 0; cdone[cid] = 1; b = 0; cid = 0   /* another took it, or a newer bound */
       fi
     };
     if
     :: ok -> atomic { wbumped = 1; wakers--; cdone[cid] = 1; ok = 0 };   /* seam.wake.wake() */
              atomic { if :: wsleep -> wsleep = 0 :: else fi; b = 0; cid = 0 }
     :: else
     fi
  :: else
  fi
}

/* futex_wait_low_half (wake_signal.hpp): sleeps while the low half holds v */
inline futex_wait(s, v, me) {
  atomic { if :: LOW(word[s]) == v -> fw[me] = s + 1 :: else fi };
  (fw[me] == 0)
}

/* futex_wake_all_low_half, from wake_waiters_if_any (runner.cpp) */
#if NPROD == 1
#define FUTEX_WAKE_ALL(s) if :: fw[0] == s + 1 -> fw[0] = 0 :: else fi
#elif NPROD == 2
#define FUTEX_WAKE_ALL(s) if :: fw[0] == s + 1 -> fw[0] = 0 :: else fi; \
                          if :: fw[1] == s + 1 -> fw[1] = 0 :: else fi
#else
#define FUTEX_WAKE_ALL(s) if :: fw[0] == s + 1 -> fw[0] = 0 :: else fi; \
                          if :: fw[1] == s + 1 -> fw[1] = 0 :: else fi; \
                          if :: fw[2] == s + 1 -> fw[2] = 0 :: else fi
#endif

/* ------------------------------------------------------------------------
 * Producers (producer_ops.cpp)
 * ---------------------------------------------------------------------- */

/* ProducerOps::withdraw_posted: a schedule that saw stopped_ after posting
 * its ADD cancels its own timer (C1, then K1); the wheel may have filed it
 * (A1) meanwhile, which only sets the filed bit. */
inline withdraw(t) {
  atomic { w = MAKE(gg, PENDING, t_per); r = 0 }   /* `pending` */
  do
  :: atomic {                                    /* (C1) compare_exchange_weak -> Cancelling */
       if
       :: word[sl] == w -> word[sl] = WITH_STATE(w, CANCELLING); ok = 1; DECIDE(t)
       :: else -> w = word[sl]; ok = 0;
          if :: (w & ~FILEDB) != MAKE(gg, PENDING, t_per) -> r = 1 :: else fi
       fi
     };
     if :: ok || r == 1 -> break :: else fi
  od;
  if
  :: ok ->                                       /* task.reset(); (K1) store Cancelled */
     atomic { OWN(sl, t); task[sl] = 0; word[sl] = WITH_STATE(w, CANCELLED); ZOMBIE(sl, word[sl]) };
     atomic {
       if
       :: !ISFILED(w) -> FREE_SLOT(sl, t)        /* free_unfiled */
       :: else                                   /* a zombie: the wheel thread or the sweep frees it */
       fi;
       t_pub[t] = 2; ok = 0; w = 0; sl = 0; gg = 0; t_per = 0   /* throws StoppedError */
     }
  :: else ->                                     /* the sweep or a claim decided it: accepted */
     atomic { t_pub[t] = 1; r = 0; w = 0; sl = 0; gg = 0; t_per = 0 }
  fi
}

/* ProducerOps::schedule; t gets the timer's number. The allocation and
 * the fields' writes ride with S1: until S1 publishes the new generation
 * nobody acts on the slot (a stale id or ADD reads a terminal word of the
 * old one either way). The first stopped_ check is a step of its own:
 * shutdown may run to its end between it and S1. */
#if MUT == 6
#define BOUND_AFTER_POST(pdue) NEED_WAKE(pdue)     /* MUT 6: loaded before the post */
#else
#define BOUND_AFTER_POST(pdue) LOAD_BOUND(pdue)
#endif
inline schedule(me, dd, per, lanef, t) {
  if
  :: stopped -> atomic { nt++; t = nt; t_pub[t] = 2 }   /* stopped_.load: StoppedError */
  :: else ->
     atomic {
       alloc(sl);                                /* slab_.allocate */
       nt++; t = nt; assert(t <= NT);
       arm_of[sl] = t; t_slot[t] = sl; t_per = per;
       gg = NEXTGEN(word[sl]); t_gen[t] = gg;
       due[sl] = dd; task[sl] = 1; s_lane[sl] = lanef;   /* the fields, before S1 */
#ifdef HAS_LANE
       s_lgen[sl] = lane_gen;
#endif
       word[sl] = MAKE(gg, PENDING, per); undecided[t] = 1; owed[sl] = 1   /* (S1) store, release */
     };
#if MUT == 6
     b = bound;                                  /* MUT 6: the bound read before the post */
#endif
     atomic { POST(me, ADD, sl, gg, dd) };      /* seam.commands.try_push(ADD) */
     /* (P1) seq_cst fence */
#if MUT == 12
     if :: false -> skip                         /* MUT 12: stopped_ not read again */
#else
     if
     :: stopped -> withdraw(t)                   /* withdraw_posted */
#endif
     :: else ->                                  /* wake_after_fence: load the bound */
        atomic { BOUND_AFTER_POST(dd); t_pub[t] = 1; sl = 0; gg = 0; t_per = 0 };
        wake_after_fence()
     fi
  fi
}

/* decide_cancel's switch on the loaded word w: sets r (an outcome) or nxt */
#if MUT == 3
#define GEN_CHECK false                          /* MUT 3: the generation not compared */
#else
#define GEN_CHECK (GEN(w) != gg)
#endif
#define C3_NEXT ((w & WAITERB) | WITH_STATE(w, RCANCELLED))
#define CANCEL_NEXT \
  if \
  :: GEN_CHECK -> r = O_UNKNOWN \
  :: else -> \
     if \
     :: ST(w) == PENDING -> nxt = WITH_STATE(w, CANCELLING) \
     :: ST(w) == WRITING -> nxt = WITH_STATE(w, CANCELLING) \
     :: ST(w) == HANDED -> nxt = WITH_STATE(w, CANCELLED) \
     :: ST(w) == RUNNING && !ISPER(w) -> r = O_RUNNING \
     :: ST(w) == RUNNING && ISPER(w) -> nxt = C3_NEXT \
     :: ST(w) == RCANCELLED -> r = O_RUNNING \
     :: ST(w) == FREE -> r = O_UNKNOWN \
     :: else -> r = O_DONE \
     fi \
  fi

#if MUT == 1
#define C_CAS_OK true                            /* MUT 1: a store, not a CAS */
#else
#define C_CAS_OK (word[sl] == w)
#endif

/* ProducerOps::decide_cancel: one CAS decides it (C1 Pending, C2 Writing,
 * C3 a periodic's run, C4 Handed); after C1 the canceller destroys the task
 * and publishes Cancelled (K1), and frees the slot if it was not filed.
 * The outcome in r. cancel() and try_cancel() are this decision (they only
 * report it differently); cancel_and_wait() follows it with the wait. */
inline decide_cancel(t) {
  atomic {
    sl = t_slot[t]; gg = t_gen[t]; r = 0;
    w = word[sl];                                /* load, acquire */
    CANCEL_NEXT
  };
  do
  :: r != 0 -> break
  :: else ->
     atomic {                                    /* (C1)/(C2)/(C3)/(C4) compare_exchange_weak, acq_rel */
       if
       :: C_CAS_OK ->
          word[sl] = nxt; ok = 1;
          cancel_true[t] = 1; cstart[t] = nstart[t];
          if
          :: ST(w) == RUNNING -> assert(!undecided[t]); r = O_STOPPED_LATER;  /* C3: no later run */
#ifdef PROBE_C3
             assert(!HASW(w));                   /* probe: C3 never meets a waiter bit */
#endif
             skip
          :: else -> DECIDE(t); r = O_WON
          fi
       :: else -> w = word[sl]; CANCEL_NEXT
       fi
     }
  od;
  if
  :: ok && ST(w) == PENDING ->                   /* (K1): task.reset(), then store Cancelled, release */
#if MUT == 15
     atomic { OWN(sl, t); task[sl] = 0; if :: !ISFILED(w) -> FREE_SLOT(sl, t) :: else fi };  /* MUT 15: freed first */
#endif
     atomic {
       OWN(sl, t); assert(word[sl] == nxt); task[sl] = 0; word[sl] = WITH_STATE(w, CANCELLED); ZOMBIE(sl, word[sl])
     };
     atomic {
#if MUT == 15
       ok = 0; w = 0; nxt = 0
     }
#else
#if MUT == 2
       FREE_SLOT(sl, t);                         /* MUT 2: freed without looking at the filed bit */
#else
       if
       :: !ISFILED(w) -> FREE_SLOT(sl, t)        /* free_unfiled: not filed, ours to free */
       :: else                                   /* filed: a zombie the wheel thread frees */
       fi;
#endif
       ok = 0; w = 0; nxt = 0
     }
#endif
  :: else -> atomic { ok = 0; w = 0; nxt = 0 }
  fi
}

inline cancel(t) {
  decide_cancel(t);
  r = 0; sl = 0; gg = 0
}

/* ProducerOps::wait_for_run_end: the waiter bit set on the exact
 * run-in-progress word (WB), then futex-wait on the low half; reload */
inline wait_for_run_end(me) {
  w = word[sl];                                  /* load, acquire */
  do
  :: GEN(w) != gg || !RIP(w) -> break
  :: else ->
     ok = 1;
     if
     :: !HASW(w) ->
#if MUT == 18
        skip                                     /* MUT 18: sleeps without setting the waiter bit */
#else
        atomic {                                 /* (WB) compare_exchange_weak w -> w | waiter */
          if
          :: word[sl] == w -> word[sl] = w | WAITERB; w = w | WAITERB
          :: else -> w = word[sl]; ok = 0        /* failed: look again */
          fi
        }
#endif
     :: else
     fi;
     if
     :: ok -> futex_wait(sl, LOW(w), me); atomic { w = word[sl]; ok = 0 }   /* futex_wait; reload, acquire */
     :: else
     fi
  od
}

/* ProducerOps::cancel_and_wait: the cancel's decision, then, on `running`,
 * wait for the run to end. Returns only after the run has ended. */
inline cancel_and_wait(t, me) {
  decide_cancel(t);
  if
  :: r == O_RUNNING || r == O_STOPPED_LATER -> wait_for_run_end(me)
  :: else
  fi;
  atomic { assert(!in_cb[t]); r = 0; w = 0; sl = 0; gg = 0 }   /* the run has returned */
}

/* ProducerOps::reschedule: R1 owns `due`, R2 publishes it with a new
 * version; a cancel that won meanwhile (C2) leaves R3 to us. An earlier due
 * posts a RESCHEDULE. The result in ok.
 * onlane: Lane::reschedule_* on the lane's thread (the model's one lane, L).
 * There a run of the lane in its ready queue (Handed) is taken back (R4):
 * under the lane's runs_active (LaneRunsHold), refused once shutdown began,
 * Handed -> Writing with a new version, so the record left in the ready
 * queue no longer holds the claim; then R2 (or C2, R3) as after R1, and an
 * ADD re-files the timer (W1 unfiled it). r: 2 after R1, 4 after R4. */
#ifdef HAS_LANE
#if MUT == 24
#define HOLD_SEES_STOPPED false                  /* MUT 24: LaneRunsHold::enter does not read stopped_ */
#else
#define HOLD_SEES_STOPPED stopped
#endif
#if MUT == 23
#define R4_CAS_OK true                           /* MUT 23: R4 a store, not a CAS */
#else
#define R4_CAS_OK (word[sl] == w)
#endif
#if MUT == 22
#define R4_NEXT(w) WITH_STATE(w, WRITING)        /* MUT 22: R4 does not bump the version */
#else
#define R4_NEXT(w) BUMPED(w, WRITING)
#endif
#if MUT == 25
#define R4_READD false                           /* MUT 25: no ADD after R4 (as a later reschedule: lazily) */
#else
#define R4_READD (r == 4)
#endif
#define HOLD_RELEASE if :: r == 4 -> runs_active-- :: else fi   /* ~LaneRunsHold: fetch_sub, release */
#else
#define R4_READD false
#define HOLD_RELEASE skip
#endif
inline reschedule(t, nd, me, onlane) {
  atomic { sl = t_slot[t]; gg = t_gen[t]; r = 0; w = word[sl] };   /* load, acquire */
  do
  :: GEN(w) != gg || (ST(w) != PENDING && ST(w) != WRITING && !(onlane && ST(w) == HANDED)) -> break
  :: GEN(w) == gg && ST(w) == WRITING ->         /* another reschedule: yield until it settles */
     atomic { (ST(word[sl]) != WRITING || GEN(word[sl]) != gg) -> w = word[sl] }
  :: GEN(w) == gg && ST(w) == PENDING ->
     atomic {                                    /* (R1) compare_exchange_weak Pending -> Writing */
       if
       :: word[sl] == w -> word[sl] = WITH_STATE(w, WRITING); r = 2
       :: else -> w = word[sl]
       fi
     };
     if :: r == 2 -> break :: else fi
#ifdef HAS_LANE
  :: onlane && GEN(w) == gg && ST(w) == HANDED ->
     /* is_own_ready_run (LaneCore::owner is this thread; slot.lane, relaxed,
      * folded in: written only before S1), then LaneRunsHold::enter */
     atomic { if :: s_lane[sl] -> runs_active++ :: else -> r = 5 fi };   /* runs_active.fetch_add, seq_cst */
     if
     :: r == 5 -> r = 0; break                   /* not this lane's run: false */
     :: r != 5 && HOLD_SEES_STOPPED -> runs_active--; break   /* stopped_.load, seq_cst: shutdown began: false */
     :: else
     fi;
     do                                          /* take_back_ready_run */
     :: GEN(w) != gg || ST(w) != HANDED -> break /* started, or cancelled: false */
     :: else ->
        atomic {                                 /* (R4) compare_exchange_weak Handed -> Writing, v+1 */
          if
          :: R4_CAS_OK ->
             word[sl] = R4_NEXT(w); w = word[sl]; r = 4;
             OWN(sl, t); held[sl]--; nstale[sl]++  /* the record left in the ready queue is stale */
          :: else -> w = word[sl]
          fi
        };
        if :: r == 4 -> break :: else fi
     od;
     if :: r != 4 -> runs_active-- :: else fi;   /* lost: ~LaneRunsHold, release */
     break
#endif
  od;
  if
  :: r == 2 || r == 4 ->
     atomic { OWN(sl, t); k = due[sl]; due[sl] = nd; nxt = WITH_STATE(w, WRITING) };  /* old_due; due store */
     atomic {                                    /* (R2) compare_exchange_strong Writing -> Pending, v+1 */
       if
       :: word[sl] == nxt -> word[sl] = BUMPED(w, PENDING); ok = 1
       :: else -> nxt = word[sl]; ok = 0
       fi
     };
     if
     :: ok && R4_READD ->                        /* taken back (R4): post_and_wake(ADD), re-filed by A1 */
#if MUT == 6
        b = bound;
#endif
        atomic { POST(me, ADD, sl, gg, nd); owed[sl] = 1 };
        /* (P1) seq_cst fence */
        atomic { BOUND_AFTER_POST(nd); w = 0; nxt = 0; k = 0 };
        wake_after_fence();
        atomic { HOLD_RELEASE; r = 0; sl = 0; gg = 0 }
     :: ok && !R4_READD && nd < k ->             /* earlier: post_and_wake(RESCHEDULE) */
#if MUT == 6
        b = bound;
#endif
        atomic { POST(me, RESCHED, sl, gg, nd) };
        /* (P1) seq_cst fence */
        atomic { assert(r == 2); BOUND_AFTER_POST(nd); r = 0; w = 0; nxt = 0; k = 0; sl = 0; gg = 0 };
        wake_after_fence()
     :: ok && !R4_READD && nd >= k ->            /* later: lazily */
        atomic { HOLD_RELEASE; r = 0; w = 0; nxt = 0; k = 0; sl = 0; gg = 0 }
     :: !ok ->                                   /* (R3) C2 won: destroy the task, store Cancelled */
        assert(ST(nxt) == CANCELLING);
        atomic { OWN(sl, t); task[sl] = 0; word[sl] = WITH_STATE(nxt, CANCELLED); ZOMBIE(sl, word[sl]) };
        atomic {
#if MUT != 11
          if
          :: !ISFILED(nxt) -> FREE_SLOT(sl, t)   /* free_unfiled */
          :: else
          fi;
#endif                                           /* MUT 11: R3 leaves the unfiled slot unfreed */
          w = 0; nxt = 0; k = 0
#ifndef HAS_LANE
          ; r = 0; sl = 0; gg = 0
#endif
        }
#ifdef HAS_LANE
        ; atomic { HOLD_RELEASE; r = 0; sl = 0; gg = 0 }  /* return: ~LaneRunsHold */
#endif
     fi
  :: else -> atomic { ok = 0; r = 0; w = 0; sl = 0; gg = 0 }
  fi
}

/* ------------------------------------------------------------------------
 * chime::Timer (timer.cpp, TimerHandleState): a mutex, the current runtime
 * timer, and an arm deferred to the end of the run in progress.
 * ---------------------------------------------------------------------- */
#ifdef HAS_TIMER
bool tm_lock;           /* TimerHandleState::mutex */
byte tm_current;        /* current (a timer number); 0: none */
bool tm_periodic;
bool tm_stopped = 1;
bool tm_in_run;
byte tm_last_run;
byte tm_deferred;       /* 0: none; 1: a one-shot; 2: a periodic */
bool tm_dying;
bool tm_dead;           /* ghost: the destructor returned, the state is freed */
#if CONFIG == 6
byte tm_rearms = 1;     /* the user's task re-arms its Timer once, from its callback */
#else
byte tm_rearms = 0;     /* configuration 7: only the user's thread arms it */
#endif
byte tm_tramp;          /* ghost: trampolines inside run() */

inline tm_lock_() { atomic { !tm_lock -> tm_lock = 1; assert(!tm_dead) } }

/* schedule_locked: a = 1 a one-shot due 1, a = 2 a periodic (first due 1) */
inline tm_schedule_locked(a, me) {
  tm_stopped = 1;
  schedule(me, 1, (a == 2), 0, tt);
  atomic {
    if
    :: t_pub[tt] == 1 -> tm_current = tt; tm_periodic = (a == 2); tm_stopped = 0
    :: else                                      /* threw: left disarmed */
    fi;
    tt = 0
  }
}

/* defer_locked: a periodic whose run is in progress runs no more (C3) */
inline tm_defer_locked(a) {
  if
  :: tm_current != 0 && tm_periodic && !tm_stopped -> cancel(tm_current)
  :: else
  fi;
  atomic { tm_stopped = 1; tm_deferred = a }
}

/* TimerHandleState::arm, past the fast path: the arm that replaces the
 * pending run is reserved before the run is cancelled (reserve_schedule,
 * then reserve_add), so that an arm refused leaves the Timer as it was.
 * ProducerOps::reserve_schedule reads stopped_ (StoppedError: nothing
 * reserved, tt stays 0) and allocates the slot; reserve_add publishes the
 * new generation in Writing (S0) and posts its ADD before the timer is
 * published: the wheel thread defers an ADD that meets Writing (A1_DECIDE)
 * until S1 or the withdrawal. No id of the generation exists before
 * commit_schedule returns it, so only the wheel thread, the sweep and a
 * stale id of the slot's previous timer (another generation) see the word
 * meanwhile. tt gets the timer's number. */
inline tm_reserve(a, me) {
  if
  :: stopped -> skip                             /* stopped_.load: StoppedError */
  :: else ->
     atomic {
       alloc(sl);                                /* slab_.allocate */
       nt++; tt = nt; assert(tt <= NT);
       arm_of[sl] = tt; t_slot[tt] = sl; t_per = (a == 2);
       gg = NEXTGEN(word[sl]); t_gen[tt] = gg;
       word[sl] = MAKE(gg, WRITING, t_per)       /* (S0) store, relaxed */
     };
     atomic { POST(me, ADD, sl, gg, 1); owed[sl] = 1; sl = 0; gg = 0; t_per = 0 }   /* try_push(ADD) */
  fi
}

/* ProducerOps::release_reservation after reserve_add, withdraw_reserved_add:
 * the Writing word to Cancelled (K1's store, release), then the slot freed
 * (free_unfiled: the ADD waits while Writing, so it was never filed); the
 * queued ADD finds Cancelled, or a later generation, and does nothing.
 * The code finishes a cancel by a guessed id (C2) here too; the model's
 * cancels name returned ids only, so the word is still S0's. */
inline tm_withdraw_reserved() {
  atomic {
    sl = t_slot[tt]; gg = t_gen[tt]; w = word[sl];   /* load, acquire */
    assert(w == MAKE(gg, WRITING, ISPER(w)));
    OWN(sl, tt); word[sl] = WITH_STATE(w, CANCELLED)   /* store, release */
  };
  atomic { FREE_SLOT(sl, tt); t_pub[tt] = 2; sl = 0; gg = 0; w = 0; tt = 0; cid = 0 }
}

/* ProducerOps::commit_schedule after reserve_add: the fields, then (S1) a
 * CAS from S0's Writing word to Pending, release (which only a cancel by a
 * guessed id could beat: the model asserts nothing did), the ADD queued
 * already; then as schedule after its post: the (P1) fence, stopped_ again
 * (withdraw_posted), the wake-up. */
inline tm_commit_locked(a, me) {
  tm_stopped = 1;
  atomic {
    sl = t_slot[tt]; gg = t_gen[tt]; t_per = (a == 2);
    OWN(sl, tt);
    due[sl] = 1; task[sl] = 1; s_lane[sl] = 0;   /* the fields, before S1 */
    assert(word[sl] == MAKE(gg, WRITING, t_per));   /* (S1) compare_exchange_strong Writing -> Pending */
    word[sl] = MAKE(gg, PENDING, t_per); undecided[tt] = 1
  };
  /* (P1) seq_cst fence */
  if
  :: stopped -> withdraw(tt)                     /* withdraw_posted */
  :: else ->                                     /* wake_after_fence: load the bound */
     atomic { BOUND_AFTER_POST(1); t_pub[tt] = 1; sl = 0; gg = 0; t_per = 0 };
     wake_after_fence()
  fi;
  atomic {
    if
    :: t_pub[tt] == 1 -> tm_current = tt; tm_periodic = (a == 2); tm_stopped = 0
    :: else                                      /* threw: left disarmed */
    fi;
    tt = 0; cid = 0
  }
}

/* TimerHandleState::arm */
inline tm_arm(a, me) {
  tm_lock_();
  if
  :: tm_dying -> skip                            /* dropped */
  :: !tm_dying && tm_in_run -> tm_defer_locked(a)
  :: else ->
     dn = 0;
     if
     :: tm_current != 0 && !tm_stopped && !tm_periodic && a == 1 ->
        reschedule(tm_current, 2, me, 0);           /* the fast path: a pending one-shot moved */
        atomic { dn = ok; ok = 0 }
     :: else
     fi;
     if
     :: dn == 0 ->
        tm_reserve(a, me);                       /* reserve_schedule, reserve_add */
        if :: tt == 0 -> dn = 1 :: else fi       /* refused: the Timer as it was */
     :: else
     fi;
     if
     :: dn == 0 && tm_current != 0 ->
        decide_cancel(tm_current);               /* try_cancel */
        if
        :: (r == O_RUNNING || r == O_STOPPED_LATER) && tm_last_run != tm_current ->
           atomic { r = 0; sl = 0; gg = 0 };
           tm_withdraw_reserved();               /* release_reservation */
           tm_defer_locked(a); dn = 1            /* started, trampoline not entered: deferred */
        :: else
        fi;
        atomic { r = 0; sl = 0; gg = 0 }
     :: else
     fi;
     if :: dn == 0 -> tm_commit_locked(a, me) :: else fi
  fi;
  atomic { tm_lock = 0; dn = 0 }
}

/* TimerHandleState::run: the trampoline, on the worker */
inline tm_trampoline(t) {
  tm_lock_();
  atomic { tm_tramp++; tm_in_run = 1; tm_last_run = t; tm_lock = 0 };
  /* task(f): the user's task re-arms its Timer (arm_after: a one-shot), once */
  if
  :: tm_rearms > 0 -> tm_rearms--; tm_arm(1, QW)
  :: else
  fi;
  /* after_run */
  tm_lock_();
  tm_in_run = 0;
  if
  :: tm_deferred != 0 ->
     atomic { dn = tm_deferred; tm_deferred = 0 };
     if :: !tm_dying -> tm_schedule_locked(dn, QW) :: else fi
  :: else
  fi;
  atomic { tm_tramp--; tm_lock = 0; dn = 0 }
}
#endif

/* ------------------------------------------------------------------------
 * One run (runner.cpp: Runner::run and end_run), on a worker,
 * on the wheel thread (workers = 0), or on a lane's thread. The dispatch
 * record is (rs, rg, rt, rfl); me: the poster's sub-queue.
 *
 * Steps that touch only what the running thread owns (the task while the
 * run is held, `due` while Running, the wheel thread's own fields) are
 * folded into the shared operation next to them: they commute with every
 * other thread's steps, so no interleaving is lost.
 * ---------------------------------------------------------------------- */
inline callback() {
#ifdef HAS_TIMER
  tm_trampoline(rt)
#else
  skip
#endif
}

/* The dequeued record m, decoded; the word loaded (run(): load, acquire).
 * A word that no longer holds the record's claim (StateWord::holds_claim:
 * its generation and version) means a reschedule on the lane's thread took
 * the run back (R4): the record is skipped, the slot not touched (ran = 4;
 * only a record the ghost marked taken back may be, and every one must be).
 * A cancel that won (C4, or X2) means the run is skipped and the holder
 * frees the slot (task.reset(), retired.add): ran = 2. */
#if MUT == 20
#define RUN_HOLDS_CLAIM (GEN(rw) == rg)          /* MUT 20: run() ignores the version */
#else
#define RUN_HOLDS_CLAIM (GEN(rw) == rg && VER(rw) == RFL_V(rfl))
#endif
#define RUN_LOADED \
  if \
  :: !RUN_HOLDS_CLAIM -> assert((rfl & F_GSTALE) != 0); ran = 4   /* R4 took it back: skip it */ \
  :: else -> \
     assert((rfl & F_GSTALE) == 0);              /* a taken-back run never starts nor frees */ \
     if \
     :: ST(rw) == CANCELLED -> OWN(rs, rt); task[rs] = 0; held[rs]--; FREE_SLOT(rs, rt); ran = 2 \
     :: else -> assert(ST(rw) == HANDED) \
     fi \
  fi
#define REC_DECODE \
  rs = REC_SLOT(m); rg = REC_GEN(m); rt = REC_T(m); rfl = REC_FL(m) | (REC_V(m) << 4); m = 0
#define RUN_LOAD REC_DECODE; rw = word[rs]; RUN_LOADED

#if MUT == 13
#define B1_CAS_OK true                           /* MUT 13: a store from the word loaded */
#else
#define B1_CAS_OK (word[rs] == rw)
#endif
#if MUT == 16
#define F2_CAS_OK true                           /* MUT 16: a store over the word */
#else
#define F2_CAS_OK (word[rs] == rw)
#endif

/* Runner::run (after RUN_LOAD) and end_run: B1 starts the run; after
 * the callback, F1 (one-shot), F3 (a periodic's final run) or F2 (re-arm),
 * or F4 when a C3 won; each wakes the cancel_and_wait callers if the word it
 * replaced had the waiter bit. */
inline run_one(where, me) {
  do
  :: ran != 0 -> break
  :: else ->
     atomic {                                    /* (B1) compare_exchange_weak Handed -> Running */
       if
       :: B1_CAS_OK ->
          word[rs] = WITH_STATE(rw, RUNNING); ran = 1;
          assert((rfl & F_GSTALE) == 0);         /* a taken-back run never starts */
          DECIDE(rt); nstart[rt]++; in_cb[rt] = 1; assert(task[rs])
       :: else -> rw = word[rs]; RUN_LOADED
       fi
     }
  od;
  if
  :: ran == 1 ->
     callback();                                 /* slot.task(firing) */
     atomic {                                    /* the callback returned; end_run: load, acquire */
       in_cb[rt] = 0; ran = 0; ok = 0;
       rw = word[rs];
       OWN(rs, rt);
       if
       :: !ISPER(rw) || (rfl & F_FINAL) != 0 -> task[rs] = 0   /* task.reset(), before F1/F3 */
       :: else ->                                /* we own `due` while Running: the next due */
          if :: (rfl & F_KEEPDUE) == 0 && due[rs] <= MAXT -> due[rs]++ :: else fi;
          k = due[rs]
       fi
     };
     if
     :: !ISPER(rw) ->                            /* one-shot */
        assert(ST(rw) == RUNNING);
        atomic {
#if MUT == 8
          rold = rw;                             /* MUT 8: a store; the waiter bit from the old load */
#else
          rold = word[rs];                       /* (F1) exchange, acq_rel */
#endif
          assert(GEN(rold) == rg);
          word[rs] = WITH_STATE(rw, FIRED);
          held[rs]--; FREE_SLOT(rs, rt)          /* retired.add */
        };
        atomic { if :: HASW(rold) -> FUTEX_WAKE_ALL(rs) :: else fi; rold = 0; rw = 0 }   /* wake_waiters_if_any */
     :: ISPER(rw) && (rfl & F_FINAL) != 0 ->     /* a periodic's final run (shutdown(fire_pending)) */
        do
        :: ok || ST(rw) != RUNNING -> break
        :: else ->
           atomic {                              /* (F3) compare_exchange_weak Running -> Fired */
             if
             :: word[rs] == rw -> word[rs] = WITH_STATE(rw, FIRED); ok = 1; held[rs]--; FREE_SLOT(rs, rt)
             :: else -> rw = word[rs]
             fi
           }
        od;
        if
        :: !ok ->                                /* a C3 won: (F4) exchange */
           assert(ST(rw) == RCANCELLED);
           atomic { rw = word[rs]; word[rs] = WITH_STATE(rw, CANCELLED); held[rs]--; FREE_SLOT(rs, rt) }
        :: else
        fi;
        atomic { if :: HASW(rw) -> FUTEX_WAKE_ALL(rs) :: else fi; rw = 0; ok = 0 }
     :: else ->                                  /* a periodic: re-arm */
        do
        :: ok || ST(rw) != RUNNING -> break
        :: else ->
           atomic {                              /* (F2) compare_exchange_weak Running -> Pending, v+1 */
             if
             :: F2_CAS_OK ->
                word[rs] = BUMPED(rw, PENDING) | ((where == AT_WHEEL) -> FILEDB : 0);
                ok = 1; undecided[rt] = 1; held[rs]--;
                if
                :: where == AT_WHEEL ->          /* workers = 0: filed here, A1 in the same CAS */
                   fil_t[rs] = rt;                 /* file_rearmed: file() */
                   if :: k <= now -> overdue[rs] = 1 :: else -> in_wheel[rs] = 1; alarm_at[rs] = k fi
                :: else
                fi
             :: else -> rw = word[rs]
             fi
           }
        od;
        if
        :: ok ->
           if :: HASW(rw) -> FUTEX_WAKE_ALL(rs) :: else fi;   /* wake_waiters_if_any */
           if
           :: where != AT_WHEEL ->               /* post_and_wake(REARM) */
#if MUT == 6
              b = bound;
#endif
              atomic { POST(me, REARM, rs, rg, k); owed[rs] = 1; ok = 0; rw = 0 };
              /* (P1) seq_cst fence */
              atomic { BOUND_AFTER_POST(k) };
              wake_after_fence()
           :: else
           fi;
           atomic { ok = 0; rw = 0; k = 0 }
        :: else ->                               /* a C3 won: task.reset(), (F4) exchange */
           assert(ST(rw) == RCANCELLED);
           atomic {
             OWN(rs, rt); task[rs] = 0;
#if MUT != 9
             rw = word[rs];                      /* (F4) exchange, acq_rel */
#endif                                           /* MUT 9: a store; the waiter bit from the old load */
             word[rs] = WITH_STATE(rw, CANCELLED);
             held[rs]--; FREE_SLOT(rs, rt)
           };
           atomic { if :: HASW(rw) -> FUTEX_WAKE_ALL(rs) :: else fi; rw = 0; k = 0 }
        fi
     fi
  :: else
  fi;
  atomic { ran = 0; rs = 0; rg = 0; rt = 0; rfl = 0; rw = 0 }
}

/* ------------------------------------------------------------------------
 * The wheel thread (wheel_thread.cpp). Its own fields (the wheel, the
 * overdue list, deferred ADDs) are touched by it alone
 * (and by shutdown once it joined it), so their updates ride with the
 * shared operation next to them.
 * ---------------------------------------------------------------------- */

/* the wheel's scans over its slots (NSLOT <= 3), as expressions */
#if NSLOT == 1
#define ANY_ZOMBIE (in_wheel[0] && ST(word[0]) == CANCELLED)
#define ANY_OVERDUE (overdue[0])
#define ANY_FILED (in_wheel[0] || overdue[0])
#define FIRST_FILED 0
#define NO_DEFERRED (dfr[0] == 0)
#define DUE_NOW(i) (overdue[i] || (in_wheel[i] && alarm_at[i] <= now))
#define ANY_DUE (DUE_NOW(0) && !(seen & 1))
#define FIRST_DUE 0
#define ANY_DFR (dfr[0] != 0 && !(seen & 1))
#define FIRST_DFR 0
#elif NSLOT == 2
#define ANY_ZOMBIE ((in_wheel[0] && ST(word[0]) == CANCELLED) || (in_wheel[1] && ST(word[1]) == CANCELLED))
#define ANY_OVERDUE (overdue[0] || overdue[1])
#define ANY_FILED (in_wheel[0] || overdue[0] || in_wheel[1] || overdue[1])
#define FIRST_FILED ((in_wheel[0] || overdue[0]) -> 0 : 1)
#define NO_DEFERRED (dfr[0] == 0 && dfr[1] == 0)
#define DUE_NOW(i) (overdue[i] || (in_wheel[i] && alarm_at[i] <= now))
#define ANY_DUE ((DUE_NOW(0) && !(seen & 1)) || (DUE_NOW(1) && !(seen & 2)))
#define FIRST_DUE ((DUE_NOW(0) && !(seen & 1)) -> 0 : 1)
#define ANY_DFR ((dfr[0] != 0 && !(seen & 1)) || (dfr[1] != 0 && !(seen & 2)))
#define FIRST_DFR ((dfr[0] != 0 && !(seen & 1)) -> 0 : 1)
#else
#define ANY_ZOMBIE ((in_wheel[0] && ST(word[0]) == CANCELLED) || (in_wheel[1] && ST(word[1]) == CANCELLED) || \
                    (in_wheel[2] && ST(word[2]) == CANCELLED))
#define ANY_OVERDUE (overdue[0] || overdue[1] || overdue[2])
#define ANY_FILED (in_wheel[0] || overdue[0] || in_wheel[1] || overdue[1] || in_wheel[2] || overdue[2])
#define FIRST_FILED ((in_wheel[0] || overdue[0]) -> 0 : ((in_wheel[1] || overdue[1]) -> 1 : 2))
#define NO_DEFERRED (dfr[0] == 0 && dfr[1] == 0 && dfr[2] == 0)
#define DUE_NOW(i) (overdue[i] || (in_wheel[i] && alarm_at[i] <= now))
#define ANY_DUE ((DUE_NOW(0) && !(seen & 1)) || (DUE_NOW(1) && !(seen & 2)) || (DUE_NOW(2) && !(seen & 4)))
#define FIRST_DUE ((DUE_NOW(0) && !(seen & 1)) -> 0 : ((DUE_NOW(1) && !(seen & 2)) -> 1 : 2))
#define ANY_DFR ((dfr[0] != 0 && !(seen & 1)) || (dfr[1] != 0 && !(seen & 2)) || (dfr[2] != 0 && !(seen & 4)))
#define FIRST_DFR ((dfr[0] != 0 && !(seen & 1)) -> 0 : ((dfr[1] != 0 && !(seen & 2)) -> 1 : 2))
#endif

/* file(): in the wheel at its due, or on the overdue list if due now */
#define FILE(s) if :: due[s] <= now -> overdue[s] = 1 :: else -> in_wheel[s] = 1; alarm_at[s] = due[s] fi

/* reclaim(): a zombie (C1/K1 or C2/R3 on a filed word), freed. The filed
 * bit comes off as the slot is freed (a plain store of the word less the
 * bit: the zombie's word, which nothing else writes; zw): a Cancelled word
 * with the bit is one whose free is still owed (shutdown's sweep reads it).
 * MUT 26 leaves the bit. */
#if MUT == 26
#define RECLAIM_UNFILE(s) skip                   /* MUT 26: reclaim leaves the filed bit */
#else
#define RECLAIM_UNFILE(s) word[s] = word[s] & ~FILEDB
#endif
#define RECLAIM(s) \
  assert(ST(word[s]) == CANCELLED); assert(!task[s]); assert(ISFILED(word[s])); \
  assert(word[s] == zw[s]); RECLAIM_UNFILE(s); zw[s] = 0; in_wheel[s] = 0; overdue[s] = 0; \
  FREE_SLOT(s, fil_t[s]); fil_t[s] = 0

/* wheel_thread.cpp, cancel_for_closed_lane (L1, L2): a timer of a closed
 * lane the wheel holds, filed or just claimed (t: the timer it holds). The
 * settled word decides: Cancelled with the task alive (a C4 while we held
 * the claim, after W1 cleared the filed bit: we free it), Cancelled
 * without (a zombie: reclaim), or a CAS to Cancelled that also clears the
 * filed bit (we free the slot right there: no free is owed). */
#if MUT == 27
#define L_CANCELLED(w) WITH_STATE(w, CANCELLED)  /* MUT 27: L1/L2 keep the filed bit */
#else
#define L_CANCELLED(w) (WITH_STATE(w, CANCELLED) & ~FILEDB)
#endif
#define CLOSED_DECIDE(s, t) \
  if \
  :: ST(w) == CANCELLED && task[s] -> \
     assert(!ISFILED(w)); \
     OWN(s, t); task[s] = 0; in_wheel[s] = 0; overdue[s] = 0; FREE_SLOT(s, t); fil_t[s] = 0; r = 1 \
  :: ST(w) == CANCELLED && !task[s] -> RECLAIM(s); r = 1 \
  :: else -> assert(ST(w) == PENDING || ST(w) == HANDED); r = 0 \
  fi
inline cancel_for_closed_lane(s, t) {
  atomic { SETTLED(word[s]) -> w = word[s]; CLOSED_DECIDE(s, t) };   /* settled_word */
  do
  :: r != 0 -> break
  :: else ->
     atomic {                                    /* (L1)/(L2) compare_exchange_weak -> Cancelled, unfiled */
       if
       :: word[s] == w ->
          word[s] = L_CANCELLED(w); DECIDE(t);
          OWN(s, t); task[s] = 0; in_wheel[s] = 0; overdue[s] = 0; FREE_SLOT(s, t); fil_t[s] = 0; r = 1
       :: else -> SETTLED(word[s]) -> w = word[s]; CLOSED_DECIDE(s, t)
       fi
     }
  od;
  atomic { r = 0; w = 0 }
}

/* dispatch(): to the workers (or this pass's batch, with workers = 0), or
 * to the lane's ready queue unless the lane was closed (L2: r = 3, done by
 * the caller). Rides with the W1 that claimed the run (the record is only
 * seen by its receiver, after). The record carries the claimed word cw's
 * generation and version (consider: d.generation, d.version). */
#ifdef HAS_LANE
#define DISPATCH(s, cw, t, fl) \
  if \
  :: s_lane[s] && s_lgen[s] != lane_gen -> r = 3 \
  :: s_lane[s] && s_lgen[s] == lane_gen -> held[s]++; ready!REC(s, GEN(cw), VER(cw), t, fl) \
  :: else -> held[s]++; batch!REC(s, GEN(cw), VER(cw), t, fl) \
  fi
#elif NWORK > 0
#define DISPATCH(s, cw, t, fl) held[s]++; handoff!REC(s, GEN(cw), VER(cw), t, fl)
#else
#define DISPATCH(s, cw, t, fl) held[s]++; batch!REC(s, GEN(cw), VER(cw), t, fl)
#endif

#if MUT == 10
#define A1_CAS_OK true                           /* MUT 10: a store from the word loaded */
#else
#define A1_CAS_OK (word[cs] == w)
#endif
#if MUT == 4
#define W1_CAS_OK true                           /* MUT 4: a store, whatever the word is now */
#elif MUT == 5
#define W1_CAS_OK ((word[s] & ~VMASK) == (w & ~VMASK))   /* MUT 5: the version not compared */
#else
#define W1_CAS_OK (word[s] == w)
#endif

/* apply() of an ADD or a REARM, on the word w just loaded (acquire) */
#define A1_DECIDE \
  if \
  :: GEN(w) != cg -> r = 1                       /* cancelled, freed by its canceller, reused: drop */ \
  :: else -> \
     assert(!ISFILED(w) && !in_wheel[cs] && !overdue[cs]);   /* not filed: no alarm either */ \
     if \
     :: ST(w) == PENDING -> r = 0                /* file it: A1 */ \
     :: ST(w) == WRITING -> dfr[cs] = cm; r = 1  /* a reschedule in flight: again next pass */ \
     :: ST(w) == CANCELLING || ST(w) == CANCELLED -> r = 1   /* its canceller frees it */ \
     :: else -> assert(false)                    /* never handed, run or fired */ \
     fi \
  fi

#ifdef HAS_LANE
#define FILE_OR_L1(s) if :: s_lane[s] && s_lgen[s] != lane_gen -> r = 3 :: else -> FILE(s) fi
#else
#define FILE_OR_L1(s) FILE(s)
#endif

inline apply_add() {
  do
  :: r != 0 -> break
  :: else ->
     atomic {                                    /* (A1) compare_exchange_weak w -> w | filed */
       if
       :: A1_CAS_OK ->
          word[cs] = w | FILEDB; fil_t[cs] = arm_of[cs]; owed[cs] = 0;
          r = 1; FILE_OR_L1(cs)                  /* file(), or its lane was closed (L1) */
       :: else -> w = word[cs]; A1_DECIDE
       fi
     }
  od;
  if :: r == 3 -> cancel_for_closed_lane(cs, fil_t[cs]) :: else fi;   /* (L1) */
  atomic { r = 0; w = 0 }
}

/* consider(), on the word w just loaded with `due`: re-file a due pushed
 * later, look again next pass at Writing/Cancelling, reclaim a zombie, or
 * claim it (r = 0: W1 next). */
#define CONSIDER_DECIDE(s) \
  if \
  :: ST(w) == PENDING && due[s] > now -> FILE(s); r = 1   /* pushed later by a reschedule: re-file */ \
  :: ST(w) == PENDING && due[s] <= now -> r = 0 \
  :: ST(w) == WRITING || ST(w) == CANCELLING -> overdue[s] = 1; r = 1   /* look again next pass */ \
  :: ST(w) == CANCELLED -> RECLAIM(s); r = 1     /* a zombie: reclaim it now */ \
  :: else -> assert(false)                       /* a filed timer is never handed, run, fired */ \
  fi

inline consider(s) {
  do
  :: r != 0 -> break
  :: else ->
     atomic {                                    /* (W1) compare_exchange_weak w -> Handed, filed cleared */
       if
       :: W1_CAS_OK ->
          word[s] = CLAIMED(w);
          assert(due[s] <= now);                 /* never early */
          tt = fil_t[s]; fil_t[s] = 0; r = 1;
          DISPATCH(s, w, tt, 0)
       :: else -> w = word[s]; CONSIDER_DECIDE(s)
       fi
     }
  od;
  if :: r == 3 -> cancel_for_closed_lane(s, tt) :: else fi;   /* (L2) */
  atomic { r = 0; w = 0; tt = 0 }
}

/* drain_all(): shutdown(fire_pending) claims every filed timer for a final run */
#define DRAIN_DECIDE(s) \
  if \
  :: ST(w) == CANCELLED -> RECLAIM(s); r = 1 \
  :: else -> assert(ST(w) == PENDING); r = 0 \
  fi
inline drain_all() {
  do
  :: atomic {                                    /* the next filed timer; settled_word */
       (ANY_FILED && SETTLED(word[FIRST_FILED])) ->
       i = FIRST_FILED; in_wheel[i] = 0; overdue[i] = 0;
       w = word[i]; DRAIN_DECIDE(i)
     };
     do
     :: r != 0 -> break
     :: else ->
        atomic {                                 /* (W1) */
          if
          :: word[i] == w ->
             word[i] = CLAIMED(w);
             tt = fil_t[i]; fil_t[i] = 0; r = 1;
             DISPATCH(i, w, tt, F_DRAINED | F_FINAL | (ISPER(w) -> F_KEEPDUE : 0))
          :: else -> SETTLED(word[i]) -> w = word[i]; DRAIN_DECIDE(i)
          fi
        }
     od;
     if :: r == 3 -> cancel_for_closed_lane(i, tt) :: else fi;
     atomic { r = 0; w = 0; tt = 0; i = 0 }
  :: !ANY_FILED -> break
  od
}


/* sweep_zombies_if_many(): the threshold is a heuristic, so with a zombie
 * filed, either way; one step (loads of different words: acquire) */
inline sweep_zombies() {
  if
  :: ANY_ZOMBIE ->
     atomic {
       for (i : 0 .. NSLOT - 1) {
         if
         :: in_wheel[i] && ST(word[i]) == CANCELLED -> in_wheel[i] = 0; RECLAIM(i)
         :: else
         fi
       };
       i = 0
     }
  :: true
  fi
}

#ifdef HAS_LANE
/* lane.cpp: close_lane_on_wheel: L1 for every filed timer of the lane */
#define LANE_FILED(i) ((in_wheel[i] || overdue[i]) && s_lane[i] && s_lgen[i] != lane_gen)
inline close_lane_on_wheel() {
  do
  :: LANE_FILED(0) -> atomic { in_wheel[0] = 0; overdue[0] = 0 }; cancel_for_closed_lane(0, fil_t[0])
  :: else -> break
  od
}
#endif

/* hand_over(): with workers = 0 the wheel thread runs this pass's batch */
inline hand_over() {
#if NWORK == 0
  do
  :: atomic { batch?m -> RUN_LOAD }; run_one(AT_WHEEL, QW)
  :: empty(batch) -> break
  od
#else
  skip
#endif
}

/* sleep(): publish the bound, (P2) fence, look at the queue, futex-wait
 * until a producer wakes us or the earliest alarm is due */
inline wheel_sleep() {
#if MUT == 7
  atomic {                                       /* seen = seam.wake.prepare(); the bound */
    k = INF;
    for (i : 0 .. NSLOT - 1) {
      if :: in_wheel[i] && alarm_at[i] < k -> k = alarm_at[i] :: else fi
    };
    i = 0;
    wbumped = 0
  };
  if                                             /* MUT 7: the queue looked at before the bound is published */
  :: qlen > 0 -> skip
  :: else ->
     atomic { bound = k; sbound = k };
     atomic { if :: !wbumped -> wsleep = 1 :: else fi };
#else
  atomic {                                       /* seen = seam.wake.prepare(); the bound, stored */
    k = INF;
    for (i : 0 .. NSLOT - 1) {
      if :: in_wheel[i] && alarm_at[i] < k -> k = alarm_at[i] :: else fi
    };
    i = 0;
    wbumped = 0;
    bound = k; sbound = k                        /* seam.wake_if_due_before_ns.store(bound) */
  };
  /* (P2) seq_cst fence */
  if
  :: qlen > 0 -> skip                            /* seam.commands.size_approx() != 0: don't sleep */
  :: else ->
     atomic { if :: !wbumped -> wsleep = 1 :: else fi };   /* futex_wait(word == seen) */
#endif
     if
     :: atomic { !wsleep -> skip }               /* woken (or the word had changed) */
     :: atomic { wsleep && k <= MAXT -> wsleep = 0; if :: now < k -> now = k :: else fi }   /* timed out */
     fi
  fi;
  atomic { bound = MINB; sbound = MINB; k = 0 }  /* seam.wake_if_due_before_ns.store(INT64_MIN) */
}

/* the next command, from any non-empty sub-queue, decoded; an ADD/REARM
 * loads its word (apply(): acquire) in the same step */
inline pop_apply() {
  atomic {
    if
    :: q[0]?cm
#if NPROD > 1
    :: q[1]?cm
#endif
#if NPROD > 2
    :: q[2]?cm
#endif
    :: q[QW]?cm
    :: q[QS]?cm
    :: q[QL]?cm
    fi;
    qlen--; cq[CMD_ID(cm)] = 0; cdone[CMD_ID(cm)] = 0; cdue[CMD_ID(cm)] = 0;
    ck = CMD_KIND(cm); cs = CMD_SLOT(cm); cg = CMD_GEN(cm);
    r = 1;
    if
    :: ck == STOP -> stop_seen = 1
    :: ck == ADD || ck == REARM -> w = word[cs]; A1_DECIDE
    :: ck == RESCHED ->                          /* due moved earlier: re-file now */
       w = word[cs];                             /* load, acquire */
       if                                        /* filed (A1) at its generation: ours; in the wheel: re-filed */
       :: GEN(w) == cg && ISFILED(w) && in_wheel[cs] -> in_wheel[cs] = 0; FILE(cs)
       :: else                                   /* not filed yet (the retry is shards.pml's), claimed
                                                  * since, or stale; or overdue: out with this pass */
       fi;
       w = 0
    :: else
    fi
  };
  if
  :: ck == ADD || ck == REARM -> apply_add()
#ifdef HAS_LANE
  :: ck == CLOSE -> close_lane_on_wheel(); close_served = 1
#endif
  :: else
  fi;
  atomic { ck = 0; cs = 0; cg = 0; cm = 0; r = 0 }
}

proctype Wheel() {
  byte ck, cs, cg, i, k, b, cid, np, r, sl, gg, tt, t_per, dn, seen;
  short cm, m, w, nxt, rw, rold;
  bool ok, stop_seen, exhausted, wheel_running = 1;
  byte ran, rs, rg, rt, rfl;
#if NWORK == 0
  xr batch; xs batch;                            /* its own: the pass's batch */
#endif
  do
  :: wheel_running ->
     /* apply_commands: the ADDs deferred last pass first (one step each,
      * with their word's load), then the queue until it is empty */
     do
     :: atomic {
          ANY_DFR ->
          cs = FIRST_DFR;
          cm = dfr[cs]; dfr[cs] = 0; seen = seen | (1 << cs);
          ck = CMD_KIND(cm); cg = CMD_GEN(cm);
          w = word[cs]; A1_DECIDE
        };
        apply_add();
        atomic { ck = 0; cs = 0; cg = 0; cm = 0; r = 0 }
     :: !ANY_DFR -> break                        /* each deferred ADD once per pass */
     od;
     seen = 0;
     do                                          /* between batches: */
     :: cancel_requested -> break                /* shutdown(cancel_pending): the backlog is not applied */
     :: else ->
        if
        :: pop_apply()                           /* pop_bulk */
        :: else -> exhausted = 1; break          /* the queue is empty */
        fi
     od;
     /* the clock read; a seq_cst fence; cancel_requested_ */
     if
     :: cancel_requested -> wheel_running = 0    /* dispatch nothing more: the sweep takes the rest */
     :: else ->
        /* advance: the overdue timers and the alarms that came up, each
         * considered once this pass (its load, with `due`, is one step) */
        do
        :: atomic {
             ANY_DUE ->
             i = FIRST_DUE; seen = seen | (1 << i);
             overdue[i] = 0; in_wheel[i] = 0;
             w = word[i]; assert(ISFILED(w) && GEN(w) == t_gen[fil_t[i]]); OWN(i, fil_t[i]);
             CONSIDER_DECIDE(i)
           };
           consider(i);
           i = 0
        :: !ANY_DUE -> break
        od;
        seen = 0;
        hand_over();
        if
        :: !exhausted || !NO_DEFERRED -> skip    /* more to apply: the next pass at once */
        :: exhausted && NO_DEFERRED && stop_seen ->
           if
           :: mode == 1 -> drain_all(); hand_over()   /* fire_pending */
           :: else
           fi;
           wheel_running = 0
        :: exhausted && NO_DEFERRED && !stop_seen ->
           sweep_zombies();
           if
           :: ANY_OVERDUE -> skip                /* due now: the next pass */
           :: else -> wheel_sleep()
           fi
        fi
     fi;
     exhausted = 0
  :: else -> break
  od;
  wheel_exited = 1;                              /* ~ExitFlag: seam.exited; the join */
  nfin++
}

#if NWORK > 0
proctype Worker() {
  byte i, k, r, b, cid, np, sl, gg, tt, t_per, dn;
  short m, w, nxt, rw, rold;
  bool ok;
  byte ran, rs, rg, rt, rfl;
  do
  :: atomic {                                    /* wait_dequeue_bulk; run(): load */
       handoff?m;
       if :: (REC_FL(m) & F_STOP) != 0 -> ran = 3 :: else -> RUN_LOAD fi
     };
     if
     :: ran == 3 -> break                        /* a stop record */
     :: else -> run_one(AT_WORKER, QW)
     fi
  od;
  workers_exited++;
  nfin++
}
#endif

/* ------------------------------------------------------------------------
 * shutdown (runtime_core.cpp, RuntimeCore::shutdown)
 * ---------------------------------------------------------------------- */
/* the sweep's decision on the settled word w of slot i: a zombie (Cancelled
 * with the filed bit: a free the wheel thread still owed) is freed, and its
 * bit cleared (a plain store, as reclaim's); Pending is X1; Handed (a lane's
 * ready run) is X2 with cancel_pending, left to the lane with fire_pending */
#define SWEEP_DECIDE \
  if \
  :: ST(w) == CANCELLED && ISFILED(w) -> SWEEP_ZOMBIE; r = 1 \
  :: ST(w) == PENDING -> r = 0 \
  :: ST(w) == HANDED && mode == 0 -> r = 0 \
  :: else -> r = 1 \
  fi
#if MUT == 17
#define SWEEP_ZOMBIE skip                        /* MUT 17: the zombie is left */
#else
#define SWEEP_ZOMBIE \
  OWN(i, fil_t[i]); assert(w == zw[i]); word[i] = w & ~FILEDB; zw[i] = 0; \
  task[i] = 0; in_wheel[i] = 0; overdue[i] = 0; FREE_SLOT(i, fil_t[i]); fil_t[i] = 0
#endif

proctype Shutdown() {
  byte i, r, cid, np;
  short w;
  (SHUTDOWN_WHEN);                               /* when the scenario calls shutdown() */
#ifdef SHUTDOWN_MODES
  if :: mode = 0 :: mode = 1 fi;
#endif
  if                                             /* cancel_pending: the wheel thread stops at its next look */
  :: mode == 0 -> cancel_requested = 1           /* cancel_requested_.store(true), seq_cst */
  :: else
  fi;
  atomic {                                       /* stopped_.store(true); the stop request */
    stopped = 1;
    POST(QS, STOP, 0, 0, 0)
  };
  wake_unconditional();                          /* seq_cst fence; seam.wake.wake() */
#if NWORK > 0
  atomic { wheel_exited -> handoff!REC(0, 0, 0, 0, F_STOP) };   /* join; stop_workers: a stop record behind every run */
  (workers_exited == NWORK);                     /* join */
#else
  (wheel_exited);                                /* shard->join() */
#endif
#ifdef HAS_LANE
  (runs_active == 0);                            /* every lane's batch in progress has finished */
#endif
  /* the sweep, slot by slot */
  for (i : 0 .. NSLOT - 1) {
    atomic { SETTLED(word[i]) -> w = word[i]; SWEEP_DECIDE };   /* settled_word */
    do
    :: r != 0 -> break
    :: else ->
       atomic {                                  /* (X1) Pending / (X2) Handed -> Cancelled */
         if
         :: word[i] == w ->
            word[i] = WITH_STATE(w, CANCELLED); DECIDE(arm_of[i]); r = 1;
            if                                   /* X1: task.reset(); the slot stays */
            :: ST(w) == PENDING -> assert(ISFILED(w) || owed[i]); task[i] = 0; abandoned[i] = 1
            :: else
            fi
         :: else -> SETTLED(word[i]) -> w = word[i]; SWEEP_DECIDE
         fi
       }
    od;
    atomic { r = 0; w = 0 }
  };
  i = 0;
  shutdown_done = 1;                             /* release */
  nfin++
}

/* ------------------------------------------------------------------------
 * The lane's thread (lane.cpp)
 * ---------------------------------------------------------------------- */
#ifdef HAS_LANE
#if MUT == 14
#define LANE_SEES_STOPPED false                  /* MUT 14: stopped_ not read after the bump */
#else
#define LANE_SEES_STOPPED stopped
#endif

/* Lanes::run_lane */
inline run_lane() {
  runs_active++;                                 /* fetch_add, seq_cst */
  if
  :: LANE_SEES_STOPPED ->                        /* seq_cst load */
     runs_active--;
     (shutdown_done);                            /* wait for the sweep */
     after_stop = 1
  :: else
  fi;
  do
  :: atomic {                                    /* try_dequeue_bulk; run(): load */
       ready?m ->
       if :: after_stop -> m = m | F_FINAL :: else fi;   /* after shutdown: final runs */
       REC_DECODE; STALE_GHOST; rw = word[rs]; RUN_LOADED
     };
     run_one(AT_LANE, QL)
  :: empty(ready) -> break
  od;
  atomic { if :: !after_stop -> runs_active-- :: else fi; after_stop = 0 }
}

/* Lanes::close_lane (the Lane's destructor, on its thread); its
 * check of a record against the word (StateWord::holds_claim), once, at the
 * load: on the lane's thread nothing else takes a run back meanwhile */
#if MUT == 21
#define L3_HOLDS_CLAIM (GEN(rw) == rg)           /* MUT 21: close_lane ignores the version */
#else
#define L3_HOLDS_CLAIM (GEN(rw) == rg && VER(rw) == RFL_V(rfl))
#endif
inline close_lane() {
  lane_gen++;                                    /* generation.fetch_add, release */
  if
  :: !stopped ->
     atomic { POST(QL, CLOSE, 0, 0, 0) };
     wake_unconditional();                       /* (P1); seam.wake.wake() */
     (close_served || wheel_exited)              /* completion.wait(seam.exited) */
  :: else
  fi;
  (!stopped || wheel_exited);                    /* shutdown begun: until the wheel thread exited */
  do                                             /* the ready queue: (L3) */
  :: atomic {                                    /* try_dequeue_bulk; load, acquire */
       ready?m -> REC_DECODE; STALE_GHOST; rw = word[rs];
       if
       :: !L3_HOLDS_CLAIM -> assert((rfl & F_GSTALE) != 0); ran = 4   /* taken back (R4): skip, touch nothing */
       :: else -> assert((rfl & F_GSTALE) == 0); ok = (ST(rw) == CANCELLED)
       fi
     };
     if
     :: ran == 4 -> atomic { ran = 0; rs = 0; rg = 0; rt = 0; rfl = 0; rw = 0 }
     :: else ->
        do
        :: ok -> break                           /* a C4 or X2 won: we only free it */
        :: else ->
           assert(ST(rw) == HANDED);
           atomic {                              /* (L3) compare_exchange_weak Handed -> Cancelled */
             if
             :: word[rs] == rw -> word[rs] = WITH_STATE(rw, CANCELLED); ok = 1; DECIDE(rt)
             :: else -> rw = word[rs]; ok = (ST(rw) == CANCELLED)
             fi
           }
        od;
        atomic { OWN(rs, rt); task[rs] = 0; held[rs]--; FREE_SLOT(rs, rt); rs = 0; rg = 0; rt = 0; rfl = 0; rw = 0; ok = 0 }
     fi
  :: empty(ready) -> break
  od
}
#endif

/* ------------------------------------------------------------------------
 * The scenarios
 * ---------------------------------------------------------------------- */
#define PRODUCER_VARS byte i, k, r, b, cid, np, sl, gg, tt, ta, tb, t_per, dn; short w, nxt; bool ok

#if CONFIG == 1
active proctype P0() {
  PRODUCER_VARS;
  schedule(0, 1, 0, 0, ta);                      /* Producer::schedule_at */
  schedule(0, 1, 0, 0, tb);                      /* may reuse t1's slot */
  nfin++
}
#endif
#if CONFIG == 3
active proctype P0() {
  PRODUCER_VARS;
  schedule(0, 1, 0, 0, ta);
  nfin++
}
#endif
#if CONFIG == 1 || CONFIG == 3 || CONFIG == 4 || CONFIG == 5
active proctype P1() {
  PRODUCER_VARS;
  (t_pub[1] != 0);
  if
  :: t_pub[1] == 1 ->
     if
     :: cancel(1)                                /* cancel, try_cancel */
     :: cancel_and_wait(1, 1)
#if CONFIG == 3
     :: true                                     /* or leave it to shutdown */
#endif
     fi
  :: else
  fi;
  nfin++
}
#endif

#if CONFIG == 2
active proctype P0() {
  PRODUCER_VARS;
  schedule(0, 2, 0, 0, ta);
  nfin++
}
active proctype P1() {
  PRODUCER_VARS;
  (t_pub[1] != 0);
  cancel(1);
  nfin++
}
active proctype P2() {
  PRODUCER_VARS;
  (t_pub[1] != 0);
  if
  :: reschedule(1, 3, 2, 0)                       /* later: no command */
  :: reschedule(1, 1, 2, 0)                       /* earlier: a RESCHEDULE */
  fi;
  nfin++
}
#endif

#if CONFIG == 4 || CONFIG == 5
active proctype P0() {
  PRODUCER_VARS;
  schedule(0, 1, 1, 0, ta);                      /* schedule_every: first due 1, period 1 */
  nfin++
}
#endif

#if CONFIG == 6 || CONFIG == 7
/* the user's thread: arms the Timer (and again), destroys it */
active proctype U() {
  PRODUCER_VARS;
  byte cur, lr;
#if CONFIG == 6
  tm_arm(2, 0);                                  /* Timer::arm_every */
#else
  tm_arm(1, 0);                                  /* Timer::arm_at: a one-shot */
  tm_arm(1, 0);                                  /* again */
#endif
  /* ~Timer (from another thread than its callback's) */
  tm_lock_();
  atomic { tm_dying = 1; tm_lock = 0 };
  /* disarm_and_wait */
  tm_lock_();
  atomic { tm_deferred = 0; cur = tm_current; lr = tm_last_run; tm_stopped = 1; tm_lock = 0 };
#if MUT == 19
  if :: cur != 0 -> cancel(cur) :: else fi;      /* MUT 19: cancel, not cancel_and_wait */
#else
  if :: cur != 0 -> cancel_and_wait(cur, 0) :: else fi;
#endif
#ifndef PROBE_NOLASTRUN
  if :: lr != 0 && lr != cur -> cancel_and_wait(lr, 0) :: else fi;
#endif
  /* the state is freed now: no trampoline may be in it, none may start */
  atomic { assert(tm_tramp == 0 && !tm_in_run); tm_dead = 1; cur = 0; lr = 0 };
  nfin++
}
#endif

#if CONFIG == 8 || CONFIG == 9
active proctype L() {
  PRODUCER_VARS;
  byte ran, rs, rg, rt, rfl, nrr;
  short m, rw, rold;
  schedule(QL, 1, 1, 1, ta);                     /* Lane::schedule_every, on its thread */
  do
  :: nrr < 2 -> nrr++; run_lane()                /* Lane::run_ready */
  :: break
  od;
  nrr = 0;
  close_lane();                                  /* ~Lane */
  nfin++
}
#endif
#if CONFIG == 11 || CONFIG == 12
active proctype L() {
  PRODUCER_VARS;
  byte ran, rs, rg, rt, rfl, nrr;
  short m, rw, rold;
  schedule(QL, 1, 0, 1, ta);                     /* Lane::schedule_at, on its thread: a one-shot due 1 */
  if                                             /* Lane::reschedule_at, on its thread: due 2 */
  :: t_pub[ta] == 1 -> reschedule(ta, 2, QL, 1)
  :: else
  fi;
  atomic { ok = 0; ta = 0 };
  do
  :: nrr < 2 -> nrr++; run_lane()                /* Lane::run_ready */
  :: break
  od;
  nrr = 0;
  close_lane();                                  /* ~Lane */
  nfin++
}
#endif
#if CONFIG == 8 || CONFIG == 11
active proctype P1() {
  PRODUCER_VARS;
  (t_pub[1] != 0);
  if
  :: t_pub[1] == 1 ->
     if
     :: cancel(1)
     :: cancel_and_wait(1, 1)
     :: true
     fi
  :: else
  fi;
  nfin++
}
#endif

#if CONFIG == 10
active proctype P0() {
  PRODUCER_VARS;
  schedule(0, 2, 0, 0, ta);                      /* files an alarm: the wheel sleeps with bound 2 */
  schedule(0, 1, 0, 0, tb);                      /* due before it: must wake the wheel */
  nfin++
}
active proctype P1() {
  PRODUCER_VARS;
  schedule(1, 1, 0, 0, ta);                      /* a second waker, racing for the same sleep */
  nfin++
}
#endif

init {
  atomic {
    run Wheel();
#if NWORK > 0
    run Worker();
#endif
    run Shutdown()
  }
}

/* ------------------------------------------------------------------------
 * Properties
 * ---------------------------------------------------------------------- */

/* At the end: every instance was decided (run or cancelled: nothing is
 * lost, and every accepted timer is fired, cancelled or counted by
 * shutdown), every task destroyed, every dispatch record consumed, every
 * slot freed (except those Pending at the sweep, which stay with the slab). */
active proctype Final() {
  byte i;
  (nfin == NPROCS);
  for (i : 1 .. NT) {
    assert(!undecided[i]);
    assert(!in_cb[i])
  };
  for (i : 0 .. NSLOT - 1) {
    assert(!task[i]);
    assert(held[i] == 0);
#ifdef HAS_LANE
    assert(nstale[i] == 0);                      /* every taken-back record was skipped */
#endif
    assert(!inuse[i] || abandoned[i]);
    assert(zw[i] == 0)                           /* every zombie freed */
  }
}

/* No lost wake-up: the wheel thread is never asleep, with no wake-up on its
 * way, while a command due before its published bound is queued and its
 * poster has made its wake-up decision. */
#define LATE(c) (cq[c] && cdone[c] && cdue[c] < sbound)
/* ANY_LATE lists the command ids literally (SPIN's LTL parser takes a bounded text) */
#if NQ == 4
#define ANY_LATE (LATE(1) || LATE(2) || LATE(3) || LATE(4) || LATE(5) || LATE(6) || LATE(7) || \
  LATE(8) || LATE(9) || LATE(10) || LATE(11) || LATE(12) || LATE(13) || \
  LATE(14) || LATE(15) || LATE(16) || LATE(17) || LATE(18) || LATE(19) || \
  LATE(20))
#elif NQ == 5
#define ANY_LATE (LATE(1) || LATE(2) || LATE(3) || LATE(4) || LATE(5) || LATE(6) || LATE(7) || \
  LATE(8) || LATE(9) || LATE(10) || LATE(11) || LATE(12) || LATE(13) || \
  LATE(14) || LATE(15) || LATE(16) || LATE(17) || LATE(18) || LATE(19) || \
  LATE(20) || LATE(21) || LATE(22) || LATE(23) || LATE(24) || LATE(25))
#elif NQ == 6
#define ANY_LATE (LATE(1) || LATE(2) || LATE(3) || LATE(4) || LATE(5) || LATE(6) || LATE(7) || \
  LATE(8) || LATE(9) || LATE(10) || LATE(11) || LATE(12) || LATE(13) || \
  LATE(14) || LATE(15) || LATE(16) || LATE(17) || LATE(18) || LATE(19) || \
  LATE(20) || LATE(21) || LATE(22) || LATE(23) || LATE(24) || LATE(25) || \
  LATE(26) || LATE(27) || LATE(28) || LATE(29) || LATE(30))
#endif
#define LOST (wsleep && !wbumped && wakers == 0 && ANY_LATE)
ltl no_lost_wakeup { [] !LOST }

/* The same, as an assertion in every safety run: a monitor that can only
 * move (and fail) in a state where the wake-up is lost. */
active proctype Watch() {
end_watch:
  atomic { LOST -> assert(false) }
}

/* A zombie's word is not written until its free (reclaim, or shutdown's
 * sweep) clears the filed bit with a plain store, which would undo any
 * write in between: a monitor that can only move (and fail) in a state
 * where a zombie's word differs from the one K1 or R3 published. */
#define ZW_WRITTEN(s) (zw[s] != 0 && word[s] != zw[s])
#if NSLOT == 1
#define ZOMBIE_WRITTEN ZW_WRITTEN(0)
#elif NSLOT == 2
#define ZOMBIE_WRITTEN (ZW_WRITTEN(0) || ZW_WRITTEN(1))
#else
#define ZOMBIE_WRITTEN (ZW_WRITTEN(0) || ZW_WRITTEN(1) || ZW_WRITTEN(2))
#endif
active proctype ZombieWatch() {
end_zwatch:
  atomic { ZOMBIE_WRITTEN -> assert(false) }
}

/* A cancel that returned true is never followed by a callback start. */
#define STICKS(t) (cancel_true[t] -> [] (nstart[t] == cstart[t]))
#if NT == 1
ltl cancel_sticks { [] STICKS(1) }
#elif NT == 2
ltl cancel_sticks { [] (STICKS(1) && STICKS(2)) }
#elif NT == 3
ltl cancel_sticks { [] (STICKS(1) && STICKS(2) && STICKS(3)) }
#else
ltl cancel_sticks { [] (STICKS(1) && STICKS(2) && STICKS(3) && STICKS(4)) }
#endif
