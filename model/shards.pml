/* SPDX-License-Identifier: BSL-1.0 */
/*
 * model/shards.pml: a SPIN model of what shards add to chime's timer slot
 * protocol: which wheel thread owns a timer, how commands reach it, and a
 * slot reused by another shard while a command of its previous timer is
 * still queued at the old one (docs/state-machine.md, "Shards: which wheel
 * thread owns a timer"; docs/model-check.md, "Shards").
 *
 * What it is: two wheel threads (shards), each with its own command
 * sub-queues, alarms and retry list, over one slab. A timer is scheduled on
 * its producer's shard: S1 records the shard in the slot (TimerSlot::shard)
 * and the ADD goes to that shard's queue. A reschedule earlier reads the
 * slot's shard and posts its RESCHEDULE there. The wheel thread that files
 * a timer (A1: the word's filed bit, at the timer's generation) is the only
 * one to touch its alarm: to re-file it (a RESCHEDULE whose generation the
 * word has, with the filed bit), claim it (W1, which clears the bit) or
 * reclaim its zombie (which clears the bit as it frees the slot).
 *
 * What it leaves to model/chime.pml: the slot protocol itself with one
 * wheel thread (lanes, the waiter bit, shutdown, the wake-up handshake,
 * several workers). Here a claimed run starts at once, on the wheel thread
 * (configurations 1, 2: workers = 0) or on the one worker (3); a cancel
 * waits for a Writing word to settle and for a Handed run to start (C2/R3
 * and C4 are chime.pml's); and there is no clock: an alarm comes due
 * whenever its shard looks at it. Every step below names the code it
 * stands for, as in chime.pml.
 *
 * Selected with the preprocessor: -DCONFIG=n and -DMUT=n (one seeded
 * routing bug; 0 = none). model/check.sh runs them (configurations s1 to
 * s3; mutations s1 to s7).
 */

#ifndef CONFIG
#define CONFIG 1
#endif
#ifndef MUT
#define MUT 0
#endif

/* ------------------------------------------------------------------------
 * Configurations
 *  1 reuse   : one slot. P0 (bound to shard 0) schedules t1, then cancels
 *              it or not; P1 (shard 1) schedules t2 once the slot is free
 *              again, so t2 reuses t1's slot while t1's ADD or RESCHEDULE
 *              may still be queued at shard 0; then cancels t2 or not. P2
 *              (shard 0) reschedules t1 earlier, then t2: each may be
 *              stale by then. Two wheel threads.
 *  2 two_live: two slots: t2 takes the other slot or t1's once it is
 *              free; otherwise as 1, so two live timers on two shards race
 *              each other's commands too.
 *  3 rearm   : two slots and one worker, shared by both shards (the pool
 *              is the runtime's). P0 (shard 0) schedules a periodic t1; P1
 *              (shard 1) a one-shot t2; P2 (shard 0) cancels t1. The worker
 *              runs what either shard dispatches, and re-arms t1 (F2) with
 *              a REARM to the shard that dispatched it (Dispatch::shard),
 *              racing the cancel (C1 on the re-armed timer, C3 on its run,
 *              then F4). t1 runs at most twice (the bound of the search).
 * ---------------------------------------------------------------------- */
#if CONFIG == 1
#define NSLOT 1
#elif CONFIG == 2
#define NSLOT 2
#elif CONFIG == 3
#define NSLOT 2
#define HAS_WORKER 1
#define MAXRUNS 2
#endif
#define NSHARD 2
#define NPROD 3
#define NT 2
#define WQ NPROD                /* the worker's sub-queue of each shard */
#define NPOST (NPROD + 1)       /* posting threads: the producers and the worker */

/* The state word (runtime/timer_state.hpp), reduced: generation, filed
 * bit, state. */
#define FREE 0
#define PENDING 1
#define WRITING 2
#define CANCELLING 3
#define HANDED 4
#define FIRED 5
#define CANCELLED 6
#define RUNNING 7
#define RCANCELLED 8            /* running, cancelled (C3): F2 fails, F4 frees */
#define FILEDB 16
#define ST(w) ((w) & 15)
#define ISFILED(w) (((w) & FILEDB) != 0)
#define GEN(w) ((w) >> 5)
#define MAKE(g, s) (((g) << 5) | (s))
#define WITH_STATE(w, s) (((w) & ~15) | (s))
#define SETTLED(w) (ST(w) != WRITING && ST(w) != CANCELLING)
#define NEXTGEN(w) ((GEN(w) == 3) -> 1 : GEN(w) + 1)

/* Commands (runtime/command.hpp): kind, slot, generation */
#define ADD 1
#define RESCHED 2
#define REARM 3
#define CMD(k, s, g) (((k) << 4) | ((s) << 2) | (g))
#define CMD_KIND(m) ((m) >> 4)
#define CMD_SLOT(m) (((m) >> 2) & 3)
#define CMD_GEN(m) ((m) & 3)

/* ------------------------------------------------------------------------
 * Shared state of the real program
 * ---------------------------------------------------------------------- */
byte word[NSLOT];        /* TimerSlot::word */
byte shard[NSLOT];       /* TimerSlot::shard: written before S1, published by it */
/* seam.commands of each shard: one sub-queue per posting thread, shard k's
 * at k * NPOST + p; moodycamel keeps each sub-queue's order, not the order
 * between them */
chan q[NSHARD * NPOST] = [2] of { byte };
/* each shard's deferred_adds and reschedules_before_add: applied again
 * next pass */
chan retry[NSHARD] = [4] of { byte };

/* The wheel threads' own: which shard's wheel holds the slot's alarm
 * (0: none; k + 1: shard k's). Only the filing shard sets and clears it. */
byte alarm_of[NSLOT];
bool s_per[NSLOT];       /* TimerSlot::period != 0: written before S1 */
#ifdef HAS_WORKER
/* pool_.handoff: a claimed run, with the claiming shard (Dispatch::shard) */
#define REC(s, g, sh) (((sh) << 4) | ((s) << 2) | (g))
#define REC_SLOT(m) (((m) >> 2) & 3)
#define REC_GEN(m) ((m) & 3)
#define REC_SHARD(m) ((m) >> 4)
chan handoff = [2] of { byte };
bool wbusy;              /* ghost: the worker holds a run (B1 to its REARM or free) */
#define WORKER_IDLE (!wbusy && empty(handoff))
#else
#define WORKER_IDLE true
#endif

/* ------------------------------------------------------------------------
 * Ghost state
 * ---------------------------------------------------------------------- */
byte nt;                  /* timers begun */
byte t_slot[NT + 1];
byte t_gen[NT + 1];
byte t_pub[NT + 1];       /* its id returned to its producer */
bool undecided[NT + 1];   /* neither started nor cancelled */
byte arm_of[NSLOT];       /* the timer the slot holds */
byte shard_of[NSLOT];     /* the shard its producer is bound to (the truth the code's `shard` records) */
bool inuse[NSLOT];
byte runs_of[NT + 1];     /* runs begun (B1) */
byte nfin;                /* producers finished */
byte wheels_done;         /* wheel threads ended */
byte workers_done;

#define OWN(s, t) assert(inuse[s] && arm_of[s] == (t))
#define DECIDE(t) assert(undecided[t]); undecided[t] = 0
/* Only the shard that filed the alarm touches it (re-file, claim, reclaim) */
#define MINE(s) assert(alarm_of[s] == me + 1)
#define FREE_SLOT(s) \
  assert(inuse[s]); assert(alarm_of[s] == 0); \
  assert(ST(word[s]) == FIRED || ST(word[s]) == CANCELLED); \
  inuse[s] = 0

/* TimerSlab::allocate: any free slot; blocks while there is none (the
 * slab would grow; here the producer waits for a reuse) */
inline alloc(s) {
  if
  :: !inuse[0] -> s = 0
#if NSLOT > 1
  :: !inuse[1] -> s = 1
#endif
  fi;
  inuse[s] = 1
}

/* ------------------------------------------------------------------------
 * Producers (runtime/producer_ops.cpp)
 * ---------------------------------------------------------------------- */

/* ProducerOps::schedule on shard `sh` (shard_for: the Producer's or the
 * thread's shard). The allocation, the fields and S1 are one step: until
 * S1 publishes the generation, nobody acts on the slot. */
inline schedule(sh, t, per) {
  atomic {
    alloc(s);
    nt++; t = nt; g = NEXTGEN(word[s]);
#if MUT != 1
    shard[s] = sh;                               /* slot.shard.store(shard.index()) */
#endif                                           /* MUT 1: the previous timer's shard stays */
    s_per[s] = per; shard_of[s] = sh; arm_of[s] = t; t_slot[t] = s; t_gen[t] = g; undecided[t] = 1;
    word[s] = MAKE(g, PENDING)                   /* (S1) */
  };
  q[sh * NPOST + me]!CMD(ADD, s, g);             /* post_and_wake(shard, ADD) */
  atomic { t_pub[t] = 1; s = 0; g = 0 }          /* the id is returned */
}

/* ProducerOps::cancel (decide_cancel, C1 and C3; finish_cancel, K1), on a
 * settled word; a cancel never needs the shard (it counts a lazy cancel on
 * it, which is a statistic). It waits for a Handed word to start (C4 is
 * chime.pml's). */
inline cancel(t) {
  s = t_slot[t]; g = t_gen[t];
  do
  :: atomic { SETTLED(word[s]) && ST(word[s]) != HANDED -> w = word[s] };  /* settled_word */
     if
     :: GEN(w) != g || !(ST(w) == PENDING || (ST(w) == RUNNING && s_per[s])) ->
        ok = 0; break                            /* stale, fired, cancelled, a one-shot's run: false */
     :: GEN(w) == g && ST(w) == RUNNING && s_per[s] ->
        atomic {                                 /* (C3) compare_exchange Running -> RunningCancelled */
          if
          :: word[s] == w -> word[s] = WITH_STATE(w, RCANCELLED); ok = 2   /* its later runs will not start */
          :: else -> ok = 0
          fi
        };
        if :: ok -> break :: else fi
     :: GEN(w) == g && ST(w) == PENDING ->
        atomic {                                 /* (C1) compare_exchange -> Cancelling */
          if
          :: word[s] == w -> word[s] = WITH_STATE(w, CANCELLING); DECIDE(t); ok = 1
          :: else -> ok = 0
          fi
        };
        if :: ok -> break :: else fi
     fi
  od;
  if
  :: ok == 1 ->
     atomic { OWN(s, t); word[s] = WITH_STATE(w, CANCELLED) };   /* task.reset(); (K1) store Cancelled */
     atomic {
       if
       :: !ISFILED(w) -> FREE_SLOT(s)            /* free_unfiled: never filed, ours to free */
       :: else                                   /* a zombie: the shard that filed it reclaims it */
       fi
     }
  :: else
  fi;
  atomic { s = 0; g = 0; w = 0; ok = 0 }
}

/* ProducerOps::reschedule to an earlier due: R1, the timer's shard, R2,
 * then a RESCHEDULE to that shard. The shard is read between R1 and R2,
 * while the rescheduler owns the slot's fields. -DPROBE_SHARD_AFTER_R2
 * reads it after R2 instead, as the code did before this model: by then
 * the timer may have run and its slot been reused by another shard's
 * timer, whose shard the read returns; that shard drops the command (its
 * generation is neither filed there nor live), so the probe passes too. */
inline reschedule_earlier(t) {
  s = t_slot[t]; g = t_gen[t];
  do
  :: atomic { SETTLED(word[s]) -> w = word[s] };  /* past_writing */
     if
     :: GEN(w) != g || ST(w) != PENDING -> ok = 0; break   /* false */
     :: else ->
        atomic {                                 /* (R1) compare_exchange -> Writing */
          if
          :: word[s] == w -> word[s] = WITH_STATE(w, WRITING); ok = 1
          :: else -> ok = 0
          fi
        };
        if :: ok -> break :: else fi
     fi
  od;
  if
  :: ok ->
#if MUT == 2
     sh = my_shard;                              /* MUT 2: to the caller's shard */
#elif !defined(PROBE_SHARD_AFTER_R2)
     sh = shard[s];                              /* own_shard = slot->shard.load() */
#endif
     atomic { OWN(s, t); word[s] = WITH_STATE(word[s], PENDING) };   /* due_ns.store; (R2) */
#if MUT != 2 && defined(PROBE_SHARD_AFTER_R2)
     sh = shard[s];
#endif
     q[sh * NPOST + me]!CMD(RESCHED, s, g)       /* post_and_wake(own, RESCHEDULE) */
  :: else
  fi;
  atomic { s = 0; g = 0; w = 0; ok = 0; sh = 0 }
}

/* ------------------------------------------------------------------------
 * The wheel threads (runtime/wheel_thread.cpp)
 * ---------------------------------------------------------------------- */

/* apply() of an ADD: A1 on the word just loaded (acquire) */
#if MUT == 3
#define ADD_STALE false                          /* MUT 3: no generation check */
#else
#define ADD_STALE (GEN(w) != g)
#endif
#define ADD_DECIDE \
  if \
  :: ADD_STALE -> r = 1                          /* cancelled, freed by its canceller, reused: drop */ \
  :: else -> \
     assert(!ISFILED(w)); \
     if \
     :: ST(w) == PENDING -> r = 0                /* file it: A1 */ \
     :: ST(w) == WRITING -> retry[me]!cm; r = 1  /* deferred_adds: again next pass */ \
     :: else -> r = 1                            /* cancelled before filing: its canceller frees it */ \
     fi \
  fi

/* apply() of a RESCHEDULE, on the word w just loaded (acquire): re-file
 * only a timer filed at the command's generation (the word has it, with
 * the filed bit: A1 of this generation, which only the timer's own shard
 * applies); a live timer whose ADD is not applied yet waits for it
 * (reschedules_before_add); anything else (claimed since, stale) is
 * dropped */
#if MUT == 4
#define FILED_AT(w, g) ISFILED(w)                    /* MUT 4: filed by anyone, any generation */
#else
#define FILED_AT(w, g) (GEN(w) == (g) && ISFILED(w))
#endif

/* reclaim()'s store: the zombie's word less the filed bit. Nothing else
 * writes a Cancelled word (asserted at the store), so a plain store. */
#if MUT == 7
#define RECLAIMED(w) (w)                             /* MUT 7: reclaim leaves the filed bit */
#else
#define RECLAIMED(w) ((w) & ~FILEDB)
#endif

/* consider(): the alarm came up (any time here: no clock) */
#ifdef MAXRUNS
#define RUN_BOUND(s) (s_per[s] && runs_of[arm_of[s]] >= MAXRUNS)   /* the search's bound, not the code's */
#else
#define RUN_BOUND(s) false
#endif
#define CONSIDER_DECIDE \
  if \
  :: ST(w) == PENDING && RUN_BOUND(s) -> r = 2   /* not due yet (the search stops its runs here) */ \
  :: ST(w) == PENDING && !RUN_BOUND(s) -> r = 0  /* claim it: W1 */ \
  :: ST(w) == WRITING || ST(w) == CANCELLING -> r = 2   /* overdue: look again next pass */ \
  :: ST(w) == CANCELLED -> r = 3                 /* a zombie: reclaim it */ \
  :: else -> assert(false)                       /* a filed timer is never handed or fired */ \
  fi

#define MY_QUEUES_EMPTY (empty(q[me * NPOST]) && empty(q[me * NPOST + 1]) && empty(q[me * NPOST + 2]) && \
                         empty(q[me * NPOST + WQ]) && empty(retry[me]))
#if NSLOT == 1
#define NO_ALARM_OF_MINE (alarm_of[0] != me + 1)
#define ALL_FREE (!inuse[0])
#else
#define NO_ALARM_OF_MINE (alarm_of[0] != me + 1 && alarm_of[1] != me + 1)
#define ALL_FREE (!inuse[0] && !inuse[1])
#endif

proctype Wheel(byte me) {
  byte cm, s, g, w, r;
  do
  :: atomic {                                    /* pop_bulk: the next command of any sub-queue */
       if
       :: q[me * NPOST]?cm
       :: q[me * NPOST + 1]?cm
       :: q[me * NPOST + 2]?cm
       :: q[me * NPOST + WQ]?cm
       :: retry[me]?cm                           /* last pass's deferred */
       fi;
       s = CMD_SLOT(cm); g = CMD_GEN(cm);
       if
       :: CMD_KIND(cm) == ADD || CMD_KIND(cm) == REARM -> w = word[s]; ADD_DECIDE   /* apply(): add, rearm */
       :: else ->
          w = word[s];                           /* load, acquire */
          if
          :: FILED_AT(w, g) -> MINE(s); r = 1    /* wheel.reschedule(alarm): ours */
          :: else ->
             if
             :: GEN(w) == g && !ISFILED(w) && (ST(w) == PENDING || ST(w) == WRITING) ->
                retry[me]!cm                     /* before its ADD: again after it */
             :: else                             /* claimed since, or stale: dropped */
             fi;
             r = 1
          fi
       fi
     };
#ifdef PROBE_ADD_READS_ALARM
     /* probe: apply()'s CHIME_ASSERT(!slot.alarm.filed()) on an ADD, after
      * the word's load and before A1: a read of the alarm of a timer this
      * shard has not filed. Its canceller may free the slot meanwhile and
      * another shard's timer reuse it, filed there: the read races that
      * shard's file() (a data race on the alarm), and the assertion fails. */
     if
     :: (CMD_KIND(cm) == ADD || CMD_KIND(cm) == REARM) && GEN(w) == g -> atomic { assert(alarm_of[s] == 0) }
     :: else
     fi;
#endif
     do                                          /* A1 */
     :: r != 0 -> break
     :: else ->
        atomic {                                 /* (A1) compare_exchange_weak w -> w | filed */
          if
          :: word[s] == w -> word[s] = w | FILEDB; r = 4
          :: else -> w = word[s]; ADD_DECIDE
          fi
        }
     od;
     if
     :: r == 4 ->
        atomic {                                 /* file(): our wheel's alarm */
          assert(shard_of[s] == me);             /* the ADD reached the timer's own shard */
          assert(alarm_of[s] == 0); alarm_of[s] = me + 1
        }
     :: else
     fi;
     atomic { cm = 0; s = 0; g = 0; w = 0; r = 0 }
  :: atomic {                                    /* advance: an alarm of ours came up; its word (acquire) */
       !NO_ALARM_OF_MINE ->
       if
       :: alarm_of[0] == me + 1 -> s = 0
#if NSLOT > 1
       :: alarm_of[1] == me + 1 -> s = 1
#endif
       fi;
       MINE(s); w = word[s]; assert(ISFILED(w)); CONSIDER_DECIDE
     };
     do
     :: r != 0 -> break
     :: else ->
        atomic {                                 /* (W1) compare_exchange_weak w -> Handed, filed cleared */
          if
          :: word[s] == w ->
             MINE(s); word[s] = WITH_STATE(w & ~FILEDB, HANDED); alarm_of[s] = 0;
#ifdef HAS_WORKER
             handoff!REC(s, GEN(w), me); r = 6   /* dispatch(): to the workers, with d.shard */
#else
             DECIDE(arm_of[s]); r = 5            /* dispatched; with workers = 0 run by this thread */
#endif
          :: else -> w = word[s]; CONSIDER_DECIDE
          fi
        }
     od;
     if
     :: r == 3 ->                                /* reclaim(): the filed bit off (a plain store), freed */
        atomic { MINE(s); assert(word[s] == w); alarm_of[s] = 0; word[s] = RECLAIMED(w); FREE_SLOT(s) }
     :: r == 5 -> atomic { word[s] = WITH_STATE(word[s], FIRED) };   /* B1 .. F1: the run */
                  atomic { FREE_SLOT(s) }                            /* retired->add */
     :: else                                     /* r == 2: overdue, again next pass */
     fi;
     atomic { s = 0; w = 0; r = 0 }
#if MUT == 5
  :: atomic {                                    /* MUT 5: a zombie sweep over the slab, not its own wheel */
       (ISFILED(word[0]) && ST(word[0]) == CANCELLED) ->
       MINE(0); alarm_of[0] = 0; word[0] = word[0] & ~FILEDB; FREE_SLOT(0)
     }
#endif
  /* stop, once no timer is left anywhere (the search's end, not shutdown's:
   * shutdown is chime.pml's) */
  :: atomic { nfin == NPROD && ALL_FREE && WORKER_IDLE && MY_QUEUES_EMPTY && NO_ALARM_OF_MINE -> break }
  od;
  wheels_done++
}

#ifdef HAS_WORKER
/* A worker (runtime/runner.cpp, run): B1, the callback, then F1 for a
 * one-shot, or for a periodic timer F2 and the REARM to the shard that
 * claimed the run (Dispatch::shard, the timer's own), or F4 after C3. */
#if MUT == 6
#define REARM_SHARD(sh) 1                        /* MUT 6: the worker thread's own shard (thread_shard) */
#else
#define REARM_SHARD(sh) (sh)                     /* shard(d.shard) */
#endif
proctype Worker() {
  byte rec, s, g, sh, w, t;
  bool ok;
  do
  :: atomic { handoff?rec -> wbusy = 1; s = REC_SLOT(rec); g = REC_GEN(rec); sh = REC_SHARD(rec) };
     atomic {                                    /* (B1) Handed -> Running: nothing else acts on it here */
       w = word[s]; assert(GEN(w) == g && ST(w) == HANDED);
       word[s] = WITH_STATE(w, RUNNING); t = arm_of[s]; DECIDE(t); runs_of[t]++
     };
     if                                          /* the callback has run */
     :: s_per[s] ->
        atomic {                                 /* (F2) compare_exchange Running -> Pending */
          w = word[s];
          if
          :: ST(w) == RUNNING -> word[s] = WITH_STATE(w, PENDING); undecided[t] = 1; ok = 1   /* its next run */
          :: else -> assert(ST(w) == RCANCELLED); ok = 0
          fi
        };
        if
        :: ok -> q[REARM_SHARD(sh) * NPOST + WQ]!CMD(REARM, s, g)   /* post_and_wake(REARM) */
        :: else -> atomic { word[s] = WITH_STATE(w, CANCELLED); FREE_SLOT(s) }   /* (F4); the worker frees */
        fi
     :: else ->
        atomic { word[s] = WITH_STATE(word[s], FIRED) };   /* (F1) */
        atomic { FREE_SLOT(s) }
     fi;
     atomic { wbusy = 0; rec = 0; s = 0; g = 0; sh = 0; w = 0; t = 0; ok = 0 }
  :: atomic { wheels_done == NSHARD -> assert(empty(handoff)); break }
  od;
  workers_done++
}
#endif

/* ------------------------------------------------------------------------
 * The threads
 * ---------------------------------------------------------------------- */
#ifndef HAS_WORKER
active proctype P0() {                           /* bound to shard 0: schedules t1, cancels it or not */
  byte me = 0, my_shard = 0, s, g, w, sh, t, ok;
  schedule(my_shard, t, 0);
  if :: cancel(t) :: skip fi;
  nfin++
}

active proctype P1() {                           /* bound to shard 1: schedules t2 (t1's slot, once free) */
  byte me = 1, my_shard = 1, s, g, w, sh, t, ok;
  (t_pub[1] == 1);                               /* after t1 */
  schedule(my_shard, t, 0);
  if :: cancel(t) :: skip fi;
  nfin++
}

active proctype P2() {                           /* a thread of shard 0: reschedules t1, then t2, earlier */
  byte me = 2, my_shard = 0, s, g, w, sh, ok;
  (t_pub[1] == 1);
  reschedule_earlier(1);
  (t_pub[2] == 1);
  reschedule_earlier(2);
  nfin++
}

init {
  atomic { run Wheel(0); run Wheel(1) }
}
#define NWORKERS 0
#else
active proctype P0() {                           /* bound to shard 0: schedules a periodic t1 */
  byte me = 0, my_shard = 0, s, g, w, sh, t, ok;
  schedule(my_shard, t, 1);
  nfin++
}

active proctype P1() {                           /* bound to shard 1: schedules a one-shot t2 */
  byte me = 1, my_shard = 1, s, g, w, sh, t, ok;
  schedule(my_shard, t, 0);
  nfin++
}

active proctype P2() {                           /* a thread of shard 0: cancels t1 */
  byte me = 2, my_shard = 0, s, g, w, sh, ok;
  (t_pub[1] == 1);
  cancel(1);
  nfin++
}

init {
  atomic { run Wheel(0); run Wheel(1); run Worker() }
}
#define NWORKERS 1
#endif

/* At the end: every timer was decided (run or cancelled), every slot
 * freed, no alarm left, every command consumed. */
active proctype Final() {
  byte i;
  (nfin == NPROD && wheels_done == NSHARD && workers_done == NWORKERS);
  for (i : 1 .. NT) { assert(!undecided[i]) };
  for (i : 0 .. NSLOT - 1) { assert(!inuse[i]); assert(alarm_of[i] == 0) };
  for (i : 0 .. NSHARD * NPOST - 1) { assert(empty(q[i])) };
  assert(empty(retry[0]) && empty(retry[1]))
}
