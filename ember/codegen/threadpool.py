"""The C thread pool that parallel loops run on (part of every generated library's prelude).

``ember_parallel_for(n, chunk, fn, ctx)`` runs ``fn(lo, hi, ctx)`` over ``[0, n)`` in chunks.
The chunks are split into one contiguous range per thread (thread 0 is the caller, workers are
1..T-1), and each thread first claims the chunks of its own range, front to back, from that
range's atomic counter; when its range is used up it steals the remaining chunks of the other
ranges from the same counters. Two consequences:

- **Locality**: consecutive kernels that parallelize over the same outer axis (the output rows of
  NHWC convolutions) give thread t the same part of the image every time, so a kernel reads
  mostly what the same core wrote into its own L2 the kernel before (with one shared counter,
  as before, the chunk-to-core assignment changed from kernel to kernel and a consumer read half
  its input from the other core's L2).
- **No waiting for late workers**: the call returns when every *claimed* chunk is done -- not
  when every worker has checked in, as an OpenMP barrier would. On a machine shared with other
  busy processes a worker that the OS has not scheduled yet claims nothing, and the caller simply
  steals its chunks instead of waiting a whole time slice for it (OpenMP's static schedule plus
  its join barrier made a 2-thread kernel several times slower than 1 thread on an
  oversubscribed machine).

Workers spin briefly for the next loop (kernels follow each other closely), then sleep on a
condition variable. Each counter packs a job sequence number with the next index, so a worker
that wakes late can never claim a chunk of a newer loop with an older loop's function. Threads:
all online CPUs by default, ``ember_set_num_threads(n)`` to change (1: everything runs on the
caller; 0: the default again). The count belongs to the library, and models whose kernels are
the same share one library (content-hash cache), so the executor sets its model's count before
each run. ``ember_set_pool_partition(0)`` switches back to one shared counter (every thread
claims the next chunk in index order), for A/B measurements.
"""

THREADPOOL_C = r"""
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
typedef void (*ember_task_fn)(int64_t lo, int64_t hi, void* ctx);
#define EMBER_MAX_THREADS 64
static struct {
  pthread_mutex_t mu; pthread_cond_t cv;
  /* per-thread range counters, (job seq << 40) | next chunk index; one cache line each */
  struct { _Atomic uint64_t claim; char pad[56]; } range[EMBER_MAX_THREADS];
  _Atomic int64_t done;            /* iterations finished in the current job */
  _Atomic uint32_t seq;            /* current job sequence number */
  ember_task_fn fn; void* ctx; int64_t n, chunk;
  int nranges;                     /* ranges of the current job (1: one shared counter) */
  int nthreads;                    /* threads of the current job: workers 1..nthreads-1 */
  int started, want, partition;
} ember_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .partition = 1};

/* chunk indices [first, end) of range r when nc chunks are split into nr ranges */
static inline int64_t ember_range_first(int64_t nc, int nr, int r) { return nc * r / nr; }

/* claim and run chunks of range r until it is used up */
static void ember_pool_run_range(uint32_t seq, int r, ember_task_fn fn, void* ctx, int64_t n,
                                int64_t chunk, int nr) {
  int64_t nc = (n + chunk - 1) / chunk;
  int64_t end = ember_range_first(nc, nr, r + 1);
  _Atomic uint64_t* claim = &ember_pool.range[r].claim;
  for (;;) {
    uint64_t c = atomic_load_explicit(claim, memory_order_acquire);
    if ((uint32_t)(c >> 40) != (seq & 0xFFFFFF)) return;
    int64_t k = (int64_t)(c & ((1ULL << 40) - 1));
    if (k >= end) return;
    uint64_t nk = ((uint64_t)(seq & 0xFFFFFF) << 40) | (uint64_t)(k + 1);
    if (!atomic_compare_exchange_weak_explicit(claim, &c, nk,
                                               memory_order_acq_rel, memory_order_acquire))
      continue;
    int64_t lo = k * chunk, hi = lo + chunk < n ? lo + chunk : n;
    fn(lo, hi, ctx);
    atomic_fetch_add_explicit(&ember_pool.done, hi - lo, memory_order_release);
  }
}

/* thread `self`: its own range first, then steal from the others in order */
static void ember_pool_run_chunks(uint32_t seq, int self, ember_task_fn fn, void* ctx,
                                  int64_t n, int64_t chunk, int nr) {
  for (int i = 0; i < nr; ++i)
    ember_pool_run_range(seq, (self + i) % nr, fn, ctx, n, chunk, nr);
}

static void* ember_pool_worker(void* arg) {
  int self = (int)(intptr_t)arg;
  uint32_t seen = 0;
  for (;;) {
    uint32_t s = atomic_load_explicit(&ember_pool.seq, memory_order_acquire);
    int spins = 0;
    while (s == seen) {
      if (++spins < 20000) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        pthread_mutex_lock(&ember_pool.mu);
        while ((s = atomic_load_explicit(&ember_pool.seq, memory_order_acquire)) == seen)
          pthread_cond_wait(&ember_pool.cv, &ember_pool.mu);
        pthread_mutex_unlock(&ember_pool.mu);
        break;
      }
      s = atomic_load_explicit(&ember_pool.seq, memory_order_acquire);
    }
    seen = s;
    pthread_mutex_lock(&ember_pool.mu);
    ember_task_fn fn = ember_pool.fn; void* ctx = ember_pool.ctx;
    int64_t n = ember_pool.n, chunk = ember_pool.chunk;
    int nr = ember_pool.nranges, nt = ember_pool.nthreads;
    uint32_t cur = atomic_load_explicit(&ember_pool.seq, memory_order_acquire);
    pthread_mutex_unlock(&ember_pool.mu);
    if (cur != s) continue;  /* a newer loop already: pick it up next round */
    if (self >= nt) continue;  /* started for a larger thread count than this job's */
    ember_pool_run_chunks(s, self % nr, fn, ctx, n, chunk, nr);
  }
  return NULL;
}

static int ember_pool_threads(void) {
  if (ember_pool.want > 0) return ember_pool.want < EMBER_MAX_THREADS ? ember_pool.want
                                                                      : EMBER_MAX_THREADS;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > EMBER_MAX_THREADS ? EMBER_MAX_THREADS : (int)n);
}

static void ember_pool_start(void) {
  int want = ember_pool_threads();
  while (ember_pool.started < want - 1) {
    pthread_t t;
    pthread_attr_t a; pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, ember_pool_worker,
                       (void*)(intptr_t)(ember_pool.started + 1)) != 0) break;
    ember_pool.started++;
  }
}

static pthread_mutex_t ember_pool_caller = PTHREAD_MUTEX_INITIALIZER;

void ember_parallel_for(int64_t n, int64_t chunk, ember_task_fn fn, void* ctx) {
  if (chunk < 1) chunk = 1;
  int nt = ember_pool_threads();
  if (nt <= 1 || n <= chunk) { fn(0, n, ctx); return; }
  pthread_mutex_lock(&ember_pool_caller);  /* one parallel loop at a time per library */
  pthread_mutex_lock(&ember_pool.mu);
  ember_pool_start();
  uint32_t seq = (atomic_load_explicit(&ember_pool.seq, memory_order_relaxed) + 1) & 0xFFFFFF;
  if (seq == 0) seq = 1;
  int64_t nc = (n + chunk - 1) / chunk;
  int nr = ember_pool.partition ? (nt < nc ? nt : (int)nc) : 1;
  ember_pool.fn = fn; ember_pool.ctx = ctx; ember_pool.n = n; ember_pool.chunk = chunk;
  ember_pool.nranges = nr;
  ember_pool.nthreads = nt;
  atomic_store_explicit(&ember_pool.done, 0, memory_order_relaxed);
  for (int r = 0; r < nr; ++r)
    atomic_store_explicit(&ember_pool.range[r].claim,
                          ((uint64_t)seq << 40) | (uint64_t)ember_range_first(nc, nr, r),
                          memory_order_release);
  atomic_store_explicit(&ember_pool.seq, seq, memory_order_release);
  pthread_cond_broadcast(&ember_pool.cv);
  pthread_mutex_unlock(&ember_pool.mu);
  ember_pool_run_chunks(seq, 0, fn, ctx, n, chunk, nr);
  /* wait for the chunks workers claimed; a worker the OS preempted mid-chunk gets this core
     (sched_yield) instead of the caller spinning until the worker's next time slice */
  for (int spins = 0; atomic_load_explicit(&ember_pool.done, memory_order_acquire) < n;
       ++spins) {
    if (spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
  }
  pthread_mutex_unlock(&ember_pool_caller);
}

void ember_set_pool_partition(int on) { ember_pool.partition = on != 0; }

void ember_set_num_threads(int n) {
  ember_pool.want = n > 0 ? n : 0;  /* 0: all online CPUs again */
#ifdef _OPENMP
  if (n > 0) omp_set_num_threads(n);
#endif
}
"""

# what a second translation unit of the same library needs to call the pool defined in the first
THREADPOOL_DECL = r"""
typedef void (*ember_task_fn)(int64_t lo, int64_t hi, void* ctx);
void ember_parallel_for(int64_t n, int64_t chunk, ember_task_fn fn, void* ctx);
"""
