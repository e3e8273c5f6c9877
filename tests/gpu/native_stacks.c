/* native_stacks.c: every thread's native stack on stderr, for the watchdog of the GPU stress
 * tests (the GPU machine has no gdb). native_stacks_arm(seconds) starts a plain pthread (it
 * needs no GIL, so it runs in a process hung on the GIL) that, after `seconds`, signals each
 * thread of the process in turn; each one writes its own backtrace (glibc's backtrace, warmed
 * up at arm time so the handler allocates nothing), headed by its thread id and name. A
 * driver thread shows as frames in libcuda.so, a thread waiting for the GIL as take_gil. */
#define _GNU_SOURCE
#include <dirent.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void dump_self(int sig) {
    (void)sig;
    void *frames[64];
    char head[128];
    char name[32] = "?";
    pthread_getname_np(pthread_self(), name, sizeof name);
    int n = snprintf(head, sizeof head, "\n--- native stack of thread %ld (%s) ---\n", (long)syscall(SYS_gettid), name);
    write(2, head, (size_t)n);
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
}

static void *watch(void *arg) {
    struct timespec t = {(time_t)(long)arg, 0};
    nanosleep(&t, NULL);
    write(2, "\nnative_stacks: the watchdog fired\n", 35);
    DIR *d = opendir("/proc/self/task");
    if (!d) return NULL;
    long me = (long)syscall(SYS_gettid);
    for (struct dirent *e; (e = readdir(d));) {
        long tid = atol(e->d_name);
        if (tid <= 0 || tid == me) continue;
        syscall(SYS_tgkill, getpid(), tid, SIGUSR2);
        struct timespec gap = {0, 50 * 1000 * 1000};
        nanosleep(&gap, NULL);
    }
    closedir(d);
    return NULL;
}

int native_stacks_arm(long seconds) {
    void *warm[4];
    backtrace(warm, 4);  /* loads libgcc_s now, not in the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = dump_self;
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR2, &sa, NULL) != 0) return -1;
    pthread_t t;
    if (pthread_create(&t, NULL, watch, (void *)seconds) != 0) return -1;
    return pthread_detach(t);
}
