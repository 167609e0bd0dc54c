/*
 * smallfiles: create N files in one directory, each written with SIZE bytes, fsynced
 * and closed, spread over T threads; print how long it took.
 *
 *   cc -O2 -pthread -o smallfiles bench/smallfiles.c
 *   smallfiles DIR NFILES THREADS [SIZE_BYTES]       (SIZE defaults to 8192)
 *
 * With SMALLFILES_FSYNC=0 in the environment the files are not fsynced (filebench's
 * filecreate: create, write, close).
 *
 * Output, one line:  files=5000 threads=4 bytes=8192 seconds=1.234 files_per_s=4051.8
 * Exit status is non-zero if any create/write/fsync/close fails. The files are left in
 * DIR (named t<thread>-<n>); the caller removes them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static long nfiles, nthreads, size_bytes;
static int do_fsync = 1;
static char *buf;

struct worker {
    pthread_t tid;
    long index;
    int failed;
};

static void *run(void *arg) {
    struct worker *w = arg;
    char path[4096];
    /* Thread i makes files i, i + T, i + 2T, ... so the total is exactly nfiles. */
    for (long n = w->index; n < nfiles; n += nthreads) {
        snprintf(path, sizeof path, "%s/t%ld-%ld", dir, w->index, n);
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) {
            fprintf(stderr, "smallfiles: open %s: %s\n", path, strerror(errno));
            w->failed = 1;
            return NULL;
        }
        long done = 0;
        while (done < size_bytes) {
            ssize_t r = write(fd, buf + done, (size_t)(size_bytes - done));
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                fprintf(stderr, "smallfiles: write %s: %s\n", path, strerror(errno));
                w->failed = 1;
                close(fd);
                return NULL;
            }
            done += r;
        }
        if (do_fsync && fsync(fd) != 0) {
            fprintf(stderr, "smallfiles: fsync %s: %s\n", path, strerror(errno));
            w->failed = 1;
            close(fd);
            return NULL;
        }
        if (close(fd) != 0) {
            fprintf(stderr, "smallfiles: close %s: %s\n", path, strerror(errno));
            w->failed = 1;
            return NULL;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s DIR NFILES THREADS [SIZE_BYTES]\n", argv[0]);
        return 2;
    }
    const char *f = getenv("SMALLFILES_FSYNC");
    do_fsync = !(f && strcmp(f, "0") == 0);
    dir = argv[1];
    nfiles = strtol(argv[2], NULL, 10);
    nthreads = strtol(argv[3], NULL, 10);
    size_bytes = argc == 5 ? strtol(argv[4], NULL, 10) : 8192;
    if (nfiles <= 0 || nthreads <= 0 || nthreads > 1024 || size_bytes < 0) {
        fprintf(stderr, "smallfiles: bad arguments\n");
        return 2;
    }
    buf = malloc(size_bytes > 0 ? (size_t)size_bytes : 1);
    if (!buf)
        return 1;
    /* Non-repeating bytes, so that compression cannot make the test cheaper. */
    unsigned long x = 0x9e3779b97f4a7c15UL;
    for (long i = 0; i < size_bytes; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (char)(x >> 24);
    }

    struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
    if (!ws)
        return 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < nthreads; i++) {
        ws[i].index = i;
        if (pthread_create(&ws[i].tid, NULL, run, &ws[i]) != 0) {
            fprintf(stderr, "smallfiles: pthread_create failed\n");
            return 1;
        }
    }
    int failed = 0;
    for (long i = 0; i < nthreads; i++) {
        pthread_join(ws[i].tid, NULL);
        failed |= ws[i].failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (failed)
        return 1;
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("files=%ld threads=%ld bytes=%ld seconds=%.3f files_per_s=%.1f\n", nfiles, nthreads,
           size_bytes, s, s > 0 ? (double)nfiles / s : 0.0);
    return 0;
}
