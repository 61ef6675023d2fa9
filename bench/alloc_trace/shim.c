/* Records every tensor buffer a process asks libtorch's CPU allocator for, in order, as the
 * request stream that `estimator-wasm/examples/replay_requests.rs` replays on the model of the
 * CUDA caching allocator: `A <bytes> <address>` for each buffer, `F <address>` when it is freed.
 *
 * libtorch's CPU allocator (c10/core/impl/alloc_cpu.cpp) takes each buffer from
 * posix_memalign and returns it with free (libc10.so imports no other aligned allocator). This
 * library, loaded with LD_PRELOAD, wraps both: a posix_memalign called from inside libc10.so is
 * a tensor's buffer and is logged and remembered; a free of a remembered address is logged.
 * Other callers (oneDNN, the tokenizer, Rust's own allocations) are passed through untouched,
 * though every free takes the library's lock (a diagnostic, not for timing). A marker
 * `M t=<s>s` precedes the first request of each second since the first request, to place
 * requests in the run's phases (the phase times of its report). Events go to the file named by
 * $ALLOC_TRACE, in blocks of 1 MiB and the rest at exit. The table of remembered addresses has
 * 4 Mi slots; past half of them used (freed slots count until the table is rebuilt), the
 * recording stops with a message on stderr rather than slow down or hang. Child processes
 * inherit $ALLOC_TRACE and LD_PRELOAD: `distill` starts none on the CPU. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int (*next_memalign)(void **, size_t, size_t);
static void (*next_free)(void *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int busy; /* set while this library itself allocates or frees */
static int ready;
static int out = -1;
static uintptr_t c10_start, c10_end;
static long first_second = -1, last_second = -1;

/* remembered addresses: open addressing, 1 marks a freed slot */
#define SLOTS (1u << 22)
static uintptr_t slots[SLOTS];
static char buffer[1 << 20];
static size_t used;
static uint32_t taken; /* slots holding an address or a freed mark */
static int stopped;

__attribute__((constructor)) static void resolve(void) {
  next_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
}

static void flush(void) {
  if (used && out >= 0 && write(out, buffer, used) < 0) perror("alloc_trace");
  used = 0;
}
static void emit(const char *text, int n) {
  if (used + (size_t)n > sizeof buffer) flush();
  memcpy(buffer + used, text, (size_t)n);
  used += (size_t)n;
}
__attribute__((destructor)) static void finish(void) {
  pthread_mutex_lock(&lock);
  flush();
  pthread_mutex_unlock(&lock);
}

/* libc10.so's mapped range, and the output file; under the lock, with busy set */
static void start(void) {
  ready = 1;
  out = open(getenv("ALLOC_TRACE"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0) {
    perror("alloc_trace: $ALLOC_TRACE");
    stopped = 1;
  }
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) {
    uintptr_t lo, hi;
    if (strstr(line, "/libc10.so") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
      if (!c10_start || lo < c10_start) c10_start = lo;
      if (hi > c10_end) c10_end = hi;
    }
  }
  if (maps) fclose(maps);
}

static uint32_t slot_of(uintptr_t p) { return (uint32_t)((p >> 6) * 2654435761u) & (SLOTS - 1); }

int posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (!next_memalign) next_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  int rc = next_memalign(memptr, alignment, size);
  uintptr_t caller = (uintptr_t)__builtin_return_address(0);
  if (rc != 0 || busy || !getenv("ALLOC_TRACE")) return rc;
  busy = 1;
  pthread_mutex_lock(&lock);
  if (!ready) start();
  if (!stopped && taken >= SLOTS / 2) {
    static const char full[] = "alloc_trace: over 2 Mi buffers tracked; recording stopped\n";
    if (write(2, full, sizeof full - 1) < 0) { /* nothing more to do */ }
    stopped = 1;
  }
  if (!stopped && caller >= c10_start && caller < c10_end) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (first_second < 0) first_second = now.tv_sec;
    char text[64];
    if (now.tv_sec != last_second) {
      last_second = now.tv_sec;
      emit(text, snprintf(text, sizeof text, "M t=%lds\n", now.tv_sec - first_second));
    }
    uintptr_t p = (uintptr_t)*memptr;
    uint32_t i = slot_of(p);
    while (slots[i] > 1) i = (i + 1) & (SLOTS - 1);
    if (slots[i] == 0) taken++;
    slots[i] = p;
    emit(text, snprintf(text, sizeof text, "A %zu %lx\n", size, (unsigned long)p));
  }
  pthread_mutex_unlock(&lock);
  busy = 0;
  return rc;
}

void free(void *ptr) {
  if (!next_free) next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  if (ptr && ready && !busy) {
    busy = 1;
    pthread_mutex_lock(&lock);
    uintptr_t p = (uintptr_t)ptr;
    for (uint32_t i = slot_of(p); slots[i]; i = (i + 1) & (SLOTS - 1)) {
      if (slots[i] == p) {
        slots[i] = 1;
        char text[64];
        emit(text, snprintf(text, sizeof text, "F %lx\n", (unsigned long)p));
        break;
      }
    }
    pthread_mutex_unlock(&lock);
    busy = 0;
  }
  next_free(ptr);
}
