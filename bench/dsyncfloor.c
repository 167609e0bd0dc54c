// bench/dsyncfloor.c — the device floor of an intent-log commit on a 2-way mirror of
// two files: how long one 8 KiB O_DIRECT write that is durable on return
// (pwritev2 RWF_DSYNC) takes on one file, on both files one after the other, on both
// as one Linux AIO submission (what Tarn's log does for a mirror), and as two plain
// direct writes followed by an fdatasync of each file.
//
//   cc -O2 -o /tmp/dsyncfloor bench/dsyncfloor.c
//   /tmp/dsyncfloor A.img B.img [writes]      # both files at least 1 GiB + 16 MiB
//
// Writes go to the 16 MiB from 1 GiB into each file (overwriting what is there: use
// scratch files, e.g. the prefilled leaves of a destroyed benchmark pool). Prints
// operations per second and microseconds per operation for each way, twice.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void must(long r, const char *what) {
    if (r < 0) {
        perror(what);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s A.img B.img [writes]\n", argv[0]);
        return 2;
    }
    int n = argc > 3 ? atoi(argv[3]) : 3000;
    int fa = open(argv[1], O_RDWR | O_DIRECT), fb = open(argv[2], O_RDWR | O_DIRECT);
    must(fa, argv[1]);
    must(fb, argv[2]);
    void *buf;
    if (posix_memalign(&buf, 4096, 8192) != 0) return 1;
    memset(buf, 7, 8192);
    aio_context_t ctx = 0;
    must(syscall(SYS_io_setup, 8, &ctx), "io_setup");
    const char *names[] = {"one file, RWF_DSYNC", "two files in turn, RWF_DSYNC", "two files, one AIO submission",
                           "two direct writes + 2 fdatasync"};
    for (int round = 0; round < 2; round++) {
        for (int mode = 0; mode < 4; mode++) {
            double t0 = now();
            for (int i = 0; i < n; i++) {
                off_t off = (1L << 30) + (i % 2048) * 8192L;
                struct iovec iov = {buf, 8192};
                if (mode == 0) {
                    must(pwritev2(fa, &iov, 1, off, RWF_DSYNC), "pwritev2");
                } else if (mode == 1) {
                    must(pwritev2(fa, &iov, 1, off, RWF_DSYNC), "pwritev2");
                    must(pwritev2(fb, &iov, 1, off, RWF_DSYNC), "pwritev2");
                } else if (mode == 2) {
                    struct iocb cb[2];
                    struct iocb *p[2];
                    memset(cb, 0, sizeof cb);
                    for (int k = 0; k < 2; k++) {
                        cb[k].aio_lio_opcode = IOCB_CMD_PWRITE;
                        cb[k].aio_fildes = k ? fb : fa;
                        cb[k].aio_buf = (unsigned long)buf;
                        cb[k].aio_nbytes = 8192;
                        cb[k].aio_offset = off;
                        cb[k].aio_rw_flags = RWF_DSYNC;
                        p[k] = &cb[k];
                    }
                    must(syscall(SYS_io_submit, ctx, 2, p), "io_submit");
                    struct io_event ev[2];
                    for (int got = 0; got < 2;) {
                        long r = syscall(SYS_io_getevents, ctx, 2 - got, 2 - got, ev, NULL);
                        must(r, "io_getevents");
                        got += (int)r;
                    }
                } else {
                    must(pwritev2(fa, &iov, 1, off, 0), "pwritev2");
                    must(pwritev2(fb, &iov, 1, off, 0), "pwritev2");
                    must(fdatasync(fa), "fdatasync");
                    must(fdatasync(fb), "fdatasync");
                }
            }
            double dt = now() - t0;
            printf("%-34s %7.0f ops/s %6.0f us/op\n", names[mode], n / dt, dt / n * 1e6);
        }
    }
    return 0;
}
