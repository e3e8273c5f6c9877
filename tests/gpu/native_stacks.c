/* native_stacks.c: every thread's native stack on stderr, for the watchdog of the GPU stress
 * tests (the GPU machine has no gdb). native_stacks_arm(seconds) starts a plain pthread (it
 * needs no GIL, so it runs in a process hung on the GIL) that, after `seconds`, signals each
 * thread of the process in turn; each one writes its own backtrace (glibc's backtrace, warmed
 * up at arm time so the handler allocates nothing), headed by its thread id and name. A
 * driver thread shows as frames in libcuda.so, a thread waiting for the GIL as take_gil.
 * native_stacks_arm_fd(seconds, fd) writes to `fd` instead of 2 (a pytest process captures
 * fd 2 into a file that an exit loses: tests/gpu/conftest.py passes a copy of the real one). */
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

static int out_fd = 2;

static void dump_self(int sig) {
    (void)sig;
    void *frames[64];
    char head[128];
    char name[32] = "?";
    pthread_getname_np(pthread_self(), name, sizeof name);
    int n = snprintf(head, sizeof head, "\n--- native stack of thread %ld (%s) ---\n", (long)syscall(SYS_gettid), name);
    write(out_fd, head, (size_t)n);
    backtrace_symbols_fd(frames, backtrace(frames, 64), out_fd);
}

static void *watch(void *arg) {
    struct timespec t = {(time_t)(long)arg, 0};
    nanosleep(&t, NULL);
    write(out_fd, "\nnative_stacks: the watchdog fired\n", 35);
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

int native_stacks_arm_fd(long seconds, int fd) {
    out_fd = fd;
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

int native_stacks_arm(long seconds) { return native_stacks_arm_fd(seconds, 2); }
