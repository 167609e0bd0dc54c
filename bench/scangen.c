/* scangen: fill a directory with a deterministic, scattered mix of files for
 * bench/scan.sh.
 *
 * Usage: scangen DIR TOTAL_BYTES SEED WRITERS
 *
 * The file list depends only on TOTAL_BYTES and SEED, and so does every file's
 * content (incompressible bytes from a per-file xorshift generator), so two runs with
 * the same arguments write the same data, whatever the storage underneath:
 *   - 90% of the bytes in files whose sizes are log-uniform between 4 KiB and
 *     100 MiB (the last one trimmed to the budget), dealt round-robin to WRITERS
 *     processes that run concurrently, each keeping 4 of its files open and appending
 *     128 KiB to each in turn;
 *   - 10% in small files, log-uniform between 4 KiB and 128 KiB, written the same way
 *     (4 at a time) by one more process at the same time, 1000 per directory.
 * The concurrent appends interleave the files' blocks in every transaction group,
 * so a block-order (naive) traversal jumps around the device while a sorted one does
 * not. Prints "files=N bytes=B seconds=S MiB_per_s=R" when done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

#define CHUNK (128 * 1024)
#define MIN_SIZE 4096ULL
#define MAX_SIZE (100ULL << 20)
#define SMALL_MAX (128ULL << 10)
#define PER_DIR 1000
#define OPEN_PER_WRITER 4 /* files each writer appends to in turn */

static uint64_t mix(uint64_t x)
{ /* splitmix64 */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t next(uint64_t *s)
{ /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static uint64_t log_uniform(uint64_t *s, uint64_t lo, uint64_t hi)
{
    double u = (double)(next(s) >> 11) / (double)(1ULL << 53);
    uint64_t v = (uint64_t)exp(log((double)lo) + u * (log((double)hi) - log((double)lo)));
    v &= ~511ULL; /* whole sectors */
    return v < lo ? lo : v > hi ? hi : v;
}

struct file {
    uint64_t size;
    int writer; /* -1: small-file process */
    char path[64];
};

static void die(const char *what, const char *path)
{
    fprintf(stderr, "scangen: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

/* One file being written: its descriptor, generator state and bytes left. */
struct open_file {
    int fd;
    uint64_t s, left;
    char path[4096];
};

static void open_one(struct open_file *o, const char *dir, const struct file *f, uint64_t seed, uint64_t idx)
{
    snprintf(o->path, sizeof o->path, "%s/%s", dir, f->path);
    o->fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o->fd < 0)
        die("open", o->path);
    o->s = mix(seed ^ mix(idx + 1)) | 1;
    o->left = f->size;
}

/* Append the next chunk (at most 128 KiB); returns 1 when the file is complete. */
static int append_chunk(struct open_file *o, char *buf)
{
    size_t n = o->left < CHUNK ? (size_t)o->left : CHUNK;
    uint64_t *w = (uint64_t *)buf;
    for (size_t i = 0; i < (n + 7) / 8; i++)
        w[i] = next(&o->s);
    size_t off = 0;
    while (off < n) {
        ssize_t r = write(o->fd, buf + off, n - off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("write", o->path);
        }
        off += (size_t)r;
    }
    o->left -= n;
    if (o->left > 0)
        return 0;
    if (close(o->fd) != 0)
        die("close", o->path);
    return 1;
}

/* Writer `w` (-1: the small files): its files, OPEN_PER_WRITER at a time, one chunk to each in turn. */
static void run_writer(const char *dir, const struct file *files, size_t n, uint64_t seed, int w)
{
    char *buf = aligned_alloc(4096, CHUNK);
    struct open_file open_files[OPEN_PER_WRITER];
    int active = 0;
    size_t i = 0;
    for (;;) {
        while (active < OPEN_PER_WRITER && i < n) {
            if (files[i].writer == w)
                open_one(&open_files[active++], dir, &files[i], seed, i);
            i++;
        }
        if (active == 0)
            break;
        for (int k = 0; k < active;) {
            if (append_chunk(&open_files[k], buf))
                open_files[k] = open_files[--active];
            else
                k++;
        }
    }
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: scangen DIR TOTAL_BYTES SEED WRITERS\n");
        return 2;
    }
    const char *dir = argv[1];
    uint64_t total = strtoull(argv[2], NULL, 10);
    uint64_t seed = strtoull(argv[3], NULL, 10);
    int writers = atoi(argv[4]);
    if (total < MIN_SIZE || writers < 1) {
        fprintf(stderr, "scangen: TOTAL_BYTES must be >= 4096 and WRITERS >= 1\n");
        return 2;
    }

    /* The file list: a pure function of (total, seed). */
    size_t cap = 1024, n = 0;
    struct file *files = malloc(cap * sizeof *files);
    uint64_t s = mix(seed) | 1;
    uint64_t big_budget = total / 10 * 9, small_budget = total - big_budget, used = 0;
    size_t nsmall = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t budget = pass == 0 ? big_budget : small_budget;
        used = 0;
        while (used + MIN_SIZE <= budget) {
            uint64_t sz = pass == 0 ? log_uniform(&s, MIN_SIZE, MAX_SIZE) : log_uniform(&s, MIN_SIZE, SMALL_MAX);
            if (sz > budget - used)
                sz = (budget - used) & ~511ULL;
            if (n == cap)
                files = realloc(files, (cap *= 2) * sizeof *files);
            struct file *f = &files[n];
            f->size = sz;
            if (pass == 0) {
                f->writer = (int)(n % (size_t)writers);
                snprintf(f->path, sizeof f->path, "w%d/f%06zu", f->writer, n);
            } else {
                f->writer = -1;
                snprintf(f->path, sizeof f->path, "small/d%03zu/s%06zu", nsmall / PER_DIR, nsmall);
                nsmall++;
            }
            n++;
            used += sz;
        }
    }

    char path[4096];
    for (int w = 0; w < writers; w++) {
        snprintf(path, sizeof path, "%s/w%d", dir, w);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            die("mkdir", path);
    }
    snprintf(path, sizeof path, "%s/small", dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die("mkdir", path);
    for (size_t d = 0; d * PER_DIR < nsmall; d++) {
        snprintf(path, sizeof path, "%s/small/d%03zu", dir, d);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            die("mkdir", path);
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t *pids = calloc((size_t)writers + 1, sizeof *pids);
    for (int w = -1; w < writers; w++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            run_writer(dir, files, n, seed, w);
            _exit(0);
        }
        pids[w + 1] = pid;
    }
    int failed = 0;
    for (int w = 0; w <= writers; w++) {
        int st;
        if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (failed) {
        fprintf(stderr, "scangen: a writer failed\n");
        return 1;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += files[i].size;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("files=%zu small=%zu bytes=%llu seconds=%.2f MiB_per_s=%.1f\n", n, nsmall, (unsigned long long)bytes, secs,
           (double)bytes / 1048576.0 / secs);
    return 0;
}
