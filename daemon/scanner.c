/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/param.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "cache-file.h"
#include "extent-map.h"
#include "fs-btrfs.h"
#include "scan-cache.h"
#include "scanner.h"
#include "util.h"

typedef struct Job {
        uint8_t uuid[16];
        char *point;             /* a mount point of the filesystem */
        uint64_t mount_id;
        unsigned dev_major, dev_minor;  /* of the mount's superblock */
        MountSource source;
        uint64_t id, generation, change_generation, creation_generation;
        uint64_t fs_generation, fs_fingerprint;  /* of the filesystem when queued */
} Job;

typedef struct Result {
        Job job;
        int error;
        bool reached;            /* the tree was searched on the job's filesystem */
        uint64_t inodes;
        DataExtent *extents;
        size_t n_extents;
        size_t held;             /* bytes of @extents, counted in ScanFs.held */
        size_t peak;             /* the most its extent array took while it was read */
        uint64_t finished_usec;  /* CLOCK_REALTIME */
        uint64_t finished_mono;  /* CLOCK_MONOTONIC */
} Result;

/* New work, gathered without the lock and handed over at once. */
typedef struct JobList {
        Job *jobs;
        size_t n, allocated;
} JobList;

/* A tree that could not be read (an I/O error, most likely) is read
 * again when it changes, or after a delay that doubles with each failure
 * of the same state, from SCAN_RETRY_FIRST_USEC to SCAN_RETRY_MAX_USEC:
 * a disk that comes back is measured again without hammering one that
 * does not. */
#define SCAN_RETRY_FIRST_USEC (10 * 1000000ULL)
#define SCAN_RETRY_MAX_USEC (3600 * 1000000ULL)

typedef struct Failure {
        uint64_t id, generation, change_generation;
        uint64_t retry_usec;     /* CLOCK_MONOTONIC: read again from then on */
        uint64_t delay_usec;     /* the last delay */
} Failure;

typedef struct ScanFs {
        ScanCacheFs cached;      /* uuid and map: what the scan cache keeps */
        Failure *failures;       /* trees that could not be read: not again until they change or retry_usec */
        size_t n_failures, allocated_failures;
        bool too_big;            /* past max_memory: no figures for it */
        /* Under lock, so that the worker keeps within max_memory too:
         * the map's memory (plus what folding a tree in may add, while it
         * does), and the extent lists outside it: read and waiting, or
         * being read. */
        size_t map_memory, held;
        bool seen;
        bool derived_stale;      /* the map changed since the snapshot figures were derived */
        bool queued;             /* jobs made, not handed over yet */
        size_t batch;            /* trees read since the filesystem was last complete */
        uint64_t batch_start, batch_end;  /* CLOCK_MONOTONIC µs: first handed over, last read */
} ScanFs;

struct Scanner {
        sd_event_source *wakeup;
        int wakeup_fd;
        sd_event_source *retry_timer;  /* at the earliest Failure.retry_usec */
        void (*on_results)(void *userdata);
        void *userdata;
        size_t max_memory;
        int nice;
        ScanIOClass io_class;
        char *cache_dir;
        bool unsaved;            /* figures came in since scan.cache was written */
        bool save_failed;
        /* The jobs of the last update, handed to the worker in the next
         * event loop iteration, once the refresh that made them is over:
         * the worker does not compete with it for a CPU and for the
         * mount table. */
        JobList ready;
        sd_event_source *hand_off;

        /* Shared with the worker, under lock. */
        pthread_t thread;
        bool thread_started;
        pthread_mutex_t lock;
        pthread_cond_t more;
        bool stop;
        Job *jobs;               /* queued: jobs[first_job .. n_jobs) */
        size_t first_job, n_jobs, allocated_jobs;
        Result *results;
        size_t n_results, allocated_results;
        bool busy;
        Job current;             /* while busy: what the worker reads */
        /* The worker went for the mount of the current job: from then on
         * it may hold that mount (a clone of it), so a mount change that
         * takes it away cancels the job.  Before, a mount change leaves
         * the job alone: worker_open() checks the mount itself. */
        bool current_opened;
        volatile bool cancel_current;
        uint64_t mount_epoch;    /* moves with every mount change */
        /* The worker's fd on a mount, kept across the jobs of a run
         * (opening a clone of a mount costs more than reading a small
         * tree).  A clone keeps its filesystem, and its devices, after
         * umount: so the main thread closes it at a mount change unless
         * it is busy (then the worker does, after the tree), without
         * waiting for the worker (nice 19) to be scheduled. */
        int worker_fd;
        bool worker_fd_busy;
        /* Test only (SUBVOLD_TEST_SCAN_PAUSE_FD): see worker_pause(). */
        int pause_fd, pause_wakeup_fd;

        /* The main thread's own; the array itself changes under lock, as
         * the worker looks its filesystems up. */
        ScanFs *fss;
        size_t n_fss, allocated_fss;
        /* While set, a thread of its own fills fss from the scan cache
         * (scanner_load()), as the main thread reads the mounts and the
         * root trees: at 100,000 subvolumes each takes some 0.3 s.
         * scanner_wait_loaded() before anything touches fss. */
        pthread_t loader;
        bool loading;
};

/* The failure of that state of subvolume @id's tree, if it failed. */
static Failure *failure_of(const ScanFs *f, uint64_t id, uint64_t generation, uint64_t change_generation) {
        for (size_t i = 0; i < f->n_failures; i++)
                if (f->failures[i].id == id && f->failures[i].generation == generation &&
                    f->failures[i].change_generation == change_generation)
                        return &f->failures[i];
        return NULL;
}

static int on_retry_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        Scanner *s = userdata;

        s->on_results(s->userdata);  /* the next update queues what is due */
        return 0;
}

static uint64_t clock_usec(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* Under lock. */
static bool jobs_empty(const Scanner *s) {
        return s->first_job == s->n_jobs;
}

/* Under lock, with the queue empty: lets its array go.  A first run
 * queues every tree at once (96 bytes a job, 0.9 MiB at 10,000
 * subvolumes), and a rescan needs a few; kept, the room would stay
 * resident for good. */
static void jobs_release(Scanner *s) {
        free(s->jobs);
        s->jobs = NULL;
        s->first_job = s->n_jobs = s->allocated_jobs = 0;
}

/* ---- the worker ---- */

/* Sets the thread's priorities, then names it: by default the idle I/O
 * class and nice 19, so that scanning yields to everything else.  Both
 * apply to this thread only.  Named last, so that whoever finds the name
 * (ps, a test) finds the priorities set. */
static void worker_set_up(const Scanner *s) {
        enum { IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_BE = 2, IOPRIO_CLASS_IDLE = 3, IOPRIO_CLASS_SHIFT = 13 };
        int ioprio = s->io_class == SCAN_IO_IDLE ? IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT
                                                 : IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT | 7;

        /* Lowering always works; raising (--scan-nice below 0) needs
         * CAP_SYS_NICE. */
        if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio) < 0)
                log_warning_errno(errno, "Cannot set the scanner's I/O priority: %m");
        if (setpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid), s->nice) < 0)
                log_warning_errno(errno, "Cannot set the scanner's CPU priority to %d: %m", s->nice);
        (void) pthread_setname_np(pthread_self(), "subvold-scan");
}

static ScanFs *scan_fs_find(Scanner *s, const uint8_t uuid[16]) {
        for (size_t i = 0; i < s->n_fss; i++)
                if (memcmp(s->fss[i].cached.uuid, uuid, 16) == 0)
                        return &s->fss[i];
        return NULL;
}

/* Under lock: @bytes of extent lists of @uuid outside its map are gone. */
static void held_release(Scanner *s, const uint8_t uuid[16], size_t bytes) {
        ScanFs *f = scan_fs_find(s, uuid);

        if (f)
                f->held -= bytes;
}

/* Under lock: ends a pause (see worker_pause()). */
static void worker_wake(Scanner *s) {
        uint64_t one = 1;

        if (s->pause_wakeup_fd >= 0)
                (void) write(s->pause_wakeup_fd, &one, sizeof one);
}

/* The extent array of the tree being read, counted in its ScanFs.held. */
typedef struct Reservation {
        Scanner *s;
        const uint8_t *uuid;
        size_t bytes, peak;
} Reservation;

/* ScanControl.may_grow: only within what max_memory leaves. */
static bool reserve(size_t bytes, void *userdata) {
        Reservation *r = userdata;
        Scanner *s = r->s;
        ScanFs *f;
        bool ok;

        pthread_mutex_lock(&s->lock);
        f = scan_fs_find(s, r->uuid);  /* gone: the job is cancelled */
        ok = bytes <= r->bytes || (f && f->map_memory + f->held - r->bytes + bytes <= s->max_memory);
        if (ok) {
                if (f)
                        f->held = f->held - r->bytes + bytes;
                r->bytes = bytes;
                if (bytes > r->peak)
                        r->peak = bytes;
        }
        pthread_mutex_unlock(&s->lock);
        return ok;
}

/* What the worker's fd on a mount (Scanner.worker_fd) is on. */
typedef struct WorkerMount {
        uint64_t mount_id, epoch;  /* Scanner.mount_epoch when opened */
        uint8_t uuid[16];          /* of the filesystem, checked */
        TreeSearchBuffer buf;
} WorkerMount;

/* Under lock. */
static void worker_fd_close(Scanner *s) {
        closep(&s->worker_fd);
        s->worker_fd = -1;
}

/* Test only: with SUBVOLD_TEST_SCAN_PAUSE_FD naming an inherited fd (a
 * pipe), the worker reads one byte from it before each tree, so that a
 * test can hold a run in its middle; at EOF it stops pausing.  A
 * cancelled job (its filesystem gone) or a stop ends the pause too; a
 * mount change does not (the job has not gone for its mount yet). */
static void worker_pause(Scanner *s, const Job *job) {
        char buf[UUID_STRING_MAX];

        if (s->pause_fd < 0)
                return;
        log_debug("Paused before subvolume %" PRIu64 " of %s (through %s, mount %" PRIu64 ").", job->id,
                  uuid_format(job->uuid, buf), job->point, job->mount_id);
        for (;;) {
                struct pollfd p[] = { { .fd = s->pause_fd, .events = POLLIN },
                                      { .fd = s->pause_wakeup_fd, .events = POLLIN } };
                uint64_t n;
                bool over;
                ssize_t k;
                char c;

                pthread_mutex_lock(&s->lock);
                over = s->stop || s->cancel_current;
                pthread_mutex_unlock(&s->lock);
                if (over) {
                        log_debug("Pause over: cancelled.");
                        return;
                }
                if (poll(p, ELEMENTSOF(p), -1) < 0)
                        continue;
                if (p[1].revents & POLLIN)
                        (void) read(s->pause_wakeup_fd, &n, sizeof n);
                if (!p[0].revents)
                        continue;
                k = read(s->pause_fd, &c, 1);
                if (k == 1) {
                        log_debug("Pause over: next tree.");
                        return;
                }
                if (k == 0 || errno != EINTR) {
                        log_debug("Pause over: no more pauses.");
                        closep(&s->pause_fd);
                        s->pause_fd = -1;
                        return;
                }
        }
}

/* An fd on the mount of @job, marked busy: the worker's, unless it is on
 * another mount or a mount changed since it was opened. */
static int worker_open(Scanner *s, const Job *job, WorkerMount *wm, int *ret_fd) {
        Mount mount = { .id = job->mount_id, .point = job->point };
        _cleanup_close_ int fd = -1;
        char buf[UUID_STRING_MAX];
        uint8_t fsid[16];
        uint64_t epoch;
        int r;

        pthread_mutex_lock(&s->lock);
        s->current_opened = true;
        if (s->worker_fd >= 0 && wm->mount_id == job->mount_id && wm->epoch == s->mount_epoch &&
            memcmp(wm->uuid, job->uuid, 16) == 0) {
                s->worker_fd_busy = true;
                *ret_fd = s->worker_fd;
                pthread_mutex_unlock(&s->lock);
                return 0;
        }
        worker_fd_close(s);
        epoch = s->mount_epoch;
        pthread_mutex_unlock(&s->lock);

        r = btrfs_open_mount(&mount, job->source, &fd);
        if (r < 0)
                return r;
        /* Mount ids are reused (mountinfo's at once): the mount may be
         * another filesystem's by now. */
        r = btrfs_read_fsid(fd, fsid);
        if (r >= 0 && memcmp(fsid, job->uuid, 16) != 0) {
                log_debug("%s is no longer btrfs filesystem %s; reading subvolume %" PRIu64 " later.", job->point,
                          uuid_format(job->uuid, buf), job->id);
                r = -ESTALE;
        }
        if (r >= 0)
                r = btrfs_search_buffer_prepare(fd, &wm->buf);
        if (r < 0)
                return r;
        wm->mount_id = job->mount_id;
        wm->epoch = epoch;
        memcpy(wm->uuid, job->uuid, 16);
        pthread_mutex_lock(&s->lock);
        s->worker_fd = *ret_fd = TAKE_FD(fd);
        s->worker_fd_busy = true;
        pthread_mutex_unlock(&s->lock);
        return 0;
}

/* Reads the tree of @res->job. */
static void worker_scan(Scanner *s, WorkerMount *wm, Result *res) {
        Reservation reservation = { .s = s, .uuid = res->job.uuid };
        ScanControl control = { .cancel = &s->cancel_current, .may_grow = reserve, .userdata = &reservation };
        char buf[UUID_STRING_MAX];
        int fd;

        res->error = worker_open(s, &res->job, wm, &fd);
        if (res->error >= 0) {
                res->reached = true;
                res->error = btrfs_scan_subvolume(fd, &wm->buf, res->job.id, &control, &res->inodes,
                                                  &res->extents, &res->n_extents);
                pthread_mutex_lock(&s->lock);
                s->worker_fd_busy = false;
                /* After an error the mount may be gone; after a mount
                 * change, the main thread could not close it while busy. */
                if (res->error < 0 || wm->epoch != s->mount_epoch)
                        worker_fd_close(s);
                pthread_mutex_unlock(&s->lock);
        }
        if (res->error == -EFBIG)
                log_debug("Stopped reading subvolume %" PRIu64 " of %s: its distinct data extents do not fit in "
                          "what --scan-max-memory leaves.", res->job.id, uuid_format(res->job.uuid, buf));
        res->held = reservation.bytes;
        res->peak = reservation.peak;
        res->finished_usec = clock_usec(CLOCK_REALTIME);
        res->finished_mono = clock_usec(CLOCK_MONOTONIC);
}

static void *worker(void *userdata) {
        Scanner *s = userdata;
        WorkerMount wm = {};
        uint64_t one = 1;

        worker_set_up(s);
        pthread_mutex_lock(&s->lock);
        for (;;) {
                Result res = {};

                if (jobs_empty(s)) {
                        /* Out of work: no fd stays on any mount, no buffer
                         * in memory. */
                        worker_fd_close(s);
                        btrfs_search_buffer_done(&wm.buf);
                }
                while (!s->stop && jobs_empty(s))
                        pthread_cond_wait(&s->more, &s->lock);
                if (s->stop)
                        break;
                s->current = s->jobs[s->first_job++];
                if (jobs_empty(s))
                        jobs_release(s);
                s->busy = true;
                s->current_opened = false;
                s->cancel_current = false;
                pthread_mutex_unlock(&s->lock);

                res.job = s->current;
                worker_pause(s, &res.job);
                worker_scan(s, &wm, &res);

                pthread_mutex_lock(&s->lock);
                s->busy = false;
                if (s->cancel_current ||
                    grow_array(&s->results, &s->allocated_results, s->n_results + 1, sizeof(Result)) < 0) {
                        held_release(s, res.job.uuid, res.held);
                        free(res.job.point);
                        free(res.extents);
                } else
                        s->results[s->n_results++] = res;
                /* Wake the main loop when a run is done, or now and then
                 * during a long one: it publishes at most once a second. */
                if (jobs_empty(s) || s->n_results % 256 == 0)
                        (void) write(s->wakeup_fd, &one, sizeof one);
        }
        worker_fd_close(s);
        pthread_mutex_unlock(&s->lock);
        btrfs_search_buffer_done(&wm.buf);
        return NULL;
}

/* ---- the main thread ---- */

static int on_wakeup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Scanner *s = userdata;
        uint64_t n;

        (void) read(fd, &n, sizeof n);
        s->on_results(s->userdata);
        return 0;
}

static void job_list_done(JobList *l);
static int on_hand_off(sd_event_source *source, void *userdata);

static void scanner_load(Scanner *s) {
        ScanCacheFs *fss;
        size_t n, users = 0;
        int r;

        r = scan_cache_load(s->cache_dir, &fss, &n);
        if (r < 0) {
                cache_file_log_load_error("scan", s->cache_dir, r);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                ScanFs *f = NULL;

                if (extent_map_memory(&fss[i].map) <= s->max_memory &&
                    grow_array(&s->fss, &s->allocated_fss, s->n_fss + 1, sizeof(ScanFs)) >= 0)
                        f = &s->fss[s->n_fss++];
                if (!f) {
                        extent_map_done(&fss[i].map);
                        continue;
                }
                *f = (ScanFs) { .cached = fss[i], .map_memory = extent_map_memory(&fss[i].map), .derived_stale = true };
                users += f->cached.map.n_users;
        }
        free(fss);
        log_debug("Read the extents of %zu subvolume(s) from the scan cache.", users);
}

static void *loader(void *userdata) {
        scanner_load(userdata);
        return NULL;
}

static void scanner_wait_loaded(Scanner *s) {
        if (s->loading) {
                pthread_join(s->loader, NULL);
                s->loading = false;
        }
}

/* Writes scan.cache when there is something new to write. */
static void scanner_save(Scanner *s) {
        _cleanup_free_ const ScanCacheFs **fss = NULL;
        size_t n = 0;
        int r;

        if (!s->cache_dir || !s->unsaved)
                return;
        fss = calloc(s->n_fss ?: 1, sizeof(*fss));
        if (!fss)
                return;
        for (size_t i = 0; i < s->n_fss; i++)
                if (!s->fss[i].too_big)
                        fss[n++] = &s->fss[i].cached;
        r = scan_cache_save(s->cache_dir, fss, n);
        s->save_failed = cache_file_log_write("scan", s->cache_dir, r, s->save_failed);
        s->unsaved = false;  /* tried: not again before new figures come */
}

/* Test only: see worker_pause(). */
static int scanner_pause_setup(Scanner *s) {
        const char *e = getenv("SUBVOLD_TEST_SCAN_PAUSE_FD");
        uint64_t fd;

        if (!e)
                return 0;
        if (parse_u64(e, &fd) < 0 || fd > INT_MAX || fcntl((int) fd, F_GETFD) < 0)
                return log_error_errno(EBADF, "SUBVOLD_TEST_SCAN_PAUSE_FD=%s is no open fd.", e);
        s->pause_fd = (int) fd;
        s->pause_wakeup_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return s->pause_wakeup_fd < 0 ? -errno : 0;
}

int scanner_new(sd_event *event, const ScannerOptions *options, void (*on_results)(void *userdata),
                void *userdata, Scanner **ret) {
        Scanner *s = calloc(1, sizeof(Scanner));
        int r;

        if (!s)
                return -ENOMEM;
        s->wakeup_fd = s->worker_fd = s->pause_fd = s->pause_wakeup_fd = -1;
        s->on_results = on_results;
        s->userdata = userdata;
        s->max_memory = options->max_memory;
        s->nice = options->nice;
        s->io_class = options->io_class;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->more, NULL);
        if (options->cache_dir) {
                s->cache_dir = strdup(options->cache_dir);
                if (!s->cache_dir) {
                        r = -ENOMEM;
                        goto fail;
                }
                s->loading = pthread_create(&s->loader, NULL, loader, s) == 0;
                if (!s->loading)
                        scanner_load(s);
        }
        s->wakeup_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->wakeup_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = scanner_pause_setup(s);
        if (r < 0)
                goto fail;
        r = sd_event_add_io(event, &s->wakeup, s->wakeup_fd, EPOLLIN, on_wakeup, s);
        if (r < 0)
                goto fail;
        r = sd_event_add_time(event, &s->retry_timer, CLOCK_MONOTONIC, UINT64_MAX, 1000000, on_retry_timer, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->retry_timer, SD_EVENT_OFF);
        if (r < 0)
                goto fail;
        r = sd_event_add_defer(event, &s->hand_off, on_hand_off, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->hand_off, SD_EVENT_OFF);
        if (r < 0)
                goto fail;
        r = -pthread_create(&s->thread, NULL, worker, s);
        if (r < 0)
                goto fail;
        s->thread_started = true;
        *ret = s;
        return 0;
fail:
        scanner_free(s);
        return r;
}

Scanner *scanner_free(Scanner *s) {
        if (!s)
                return NULL;
        scanner_wait_loaded(s);
        scanner_save(s);
        if (s->thread_started) {
                pthread_mutex_lock(&s->lock);
                s->stop = true;
                s->cancel_current = true;
                pthread_cond_signal(&s->more);
                worker_wake(s);
                pthread_mutex_unlock(&s->lock);
                pthread_join(s->thread, NULL);
        }
        for (size_t i = s->first_job; i < s->n_jobs; i++)
                free(s->jobs[i].point);
        for (size_t i = 0; i < s->n_results; i++) {
                free(s->results[i].job.point);
                free(s->results[i].extents);
        }
        for (size_t i = 0; i < s->n_fss; i++) {
                extent_map_done(&s->fss[i].cached.map);
                free(s->fss[i].failures);
        }
        free(s->cache_dir);
        job_list_done(&s->ready);
        sd_event_source_disable_unref(s->hand_off);
        sd_event_source_disable_unref(s->retry_timer);
        free(s->jobs);
        free(s->results);
        free(s->fss);
        sd_event_source_disable_unref(s->wakeup);
        closep(&s->wakeup_fd);
        closep(&s->pause_fd);
        closep(&s->pause_wakeup_fd);
        pthread_cond_destroy(&s->more);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

static ScanFs *scan_fs_get(Scanner *s, const uint8_t uuid[16]) {
        ScanFs *f = scan_fs_find(s, uuid);

        if (f)
                return f;
        pthread_mutex_lock(&s->lock);
        if (grow_array(&s->fss, &s->allocated_fss, s->n_fss + 1, sizeof(ScanFs)) >= 0) {
                f = &s->fss[s->n_fss++];
                *f = (ScanFs) {};
                memcpy(f->cached.uuid, uuid, 16);
        }
        pthread_mutex_unlock(&s->lock);
        return f;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

/* Under lock: the sorted ids of the subvolumes of @uuid that are queued
 * or being read, so that none is queued twice. */
static int pending_ids(const Scanner *s, const uint8_t uuid[16], uint64_t **ret, size_t *ret_n) {
        uint64_t *ids = malloc((s->n_jobs - s->first_job + 1) * sizeof(uint64_t));
        size_t n = 0;

        if (!ids)
                return -ENOMEM;
        if (s->busy && memcmp(s->current.uuid, uuid, 16) == 0)
                ids[n++] = s->current.id;
        for (size_t i = s->first_job; i < s->n_jobs; i++)
                if (memcmp(s->jobs[i].uuid, uuid, 16) == 0)
                        ids[n++] = s->jobs[i].id;
        if (n > 1)
                qsort(ids, n, sizeof(uint64_t), cmp_u64);
        *ret = ids;
        *ret_n = n;
        return 0;
}

/* Under lock: drops queued work for a filesystem that is gone. */
static void jobs_cancel(Scanner *s, const uint8_t uuid[16]) {
        size_t out = s->first_job;

        for (size_t i = s->first_job; i < s->n_jobs; i++) {
                if (memcmp(s->jobs[i].uuid, uuid, 16) == 0)
                        free(s->jobs[i].point);
                else
                        s->jobs[out++] = s->jobs[i];
        }
        s->n_jobs = out;
        if (jobs_empty(s))
                jobs_release(s);
        if (s->busy && memcmp(s->current.uuid, uuid, 16) == 0) {
                s->cancel_current = true;
                worker_wake(s);
        }
}

/* Tells the worker what the map of @f holds now. */
static void scan_fs_publish(Scanner *s, ScanFs *f) {
        pthread_mutex_lock(&s->lock);
        f->map_memory = extent_map_memory(&f->cached.map);
        pthread_mutex_unlock(&s->lock);
}

/* Past max_memory: no figures for @f, and no more reading. */
static void scan_fs_too_big(Scanner *s, ScanFs *f) {
        char buf[UUID_STRING_MAX];

        log_warning("btrfs filesystem %s needs more than %zu bytes to measure its usage; not measuring it "
                    "(see --scan-max-memory).", uuid_format(f->cached.uuid, buf), s->max_memory);
        extent_map_done(&f->cached.map);
        f->too_big = true;
        pthread_mutex_lock(&s->lock);
        f->map_memory = 0;
        jobs_cancel(s, f->cached.uuid);
        pthread_mutex_unlock(&s->lock);
}

/* Folds one finished scan into the map of @f; returns whether figures
 * changed. */
static bool scan_fs_fold(Scanner *s, ScanFs *f, Result *res) {
        char buf[UUID_STRING_MAX];
        size_t growth;
        bool fits;
        int r;

        if (res->error == -EFBIG) {
                scan_fs_too_big(s, f);
                return true;
        }
        /* Only a tree that could not be read on its own filesystem is its
         * failure: a mount that went or was replaced, or a cancelled job,
         * is read again when the filesystem is next reachable. */
        if (res->error < 0 && res->reached && res->error != -ECANCELED) {
                Failure *failure = failure_of(f, res->job.id, res->job.generation, res->job.change_generation);

                if (!failure && grow_array(&f->failures, &f->allocated_failures, f->n_failures + 1,
                                           sizeof(Failure)) >= 0) {
                        failure = &f->failures[f->n_failures++];
                        *failure = (Failure) { .id = res->job.id, .generation = res->job.generation,
                                               .change_generation = res->job.change_generation };
                }
                if (failure) {
                        failure->delay_usec = failure->delay_usec ? MIN(failure->delay_usec * 2, SCAN_RETRY_MAX_USEC)
                                                                  : SCAN_RETRY_FIRST_USEC;
                        failure->retry_usec = clock_usec(CLOCK_MONOTONIC) + failure->delay_usec;
                        /* Deleted meanwhile, most likely (ENOENT).  Anything
                         * else (an I/O error) is news for the administrator. */
                        log_errno_internal(res->error == -ENOENT ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING, res->error,
                                           "Scan of subvolume %" PRIu64 " failed, trying again in %" PRIu64 " s or when it changes: %m",
                                           res->job.id, failure->delay_usec / 1000000);
                }
        }
        if (res->error < 0)
                return false;
        Failure *failure = failure_of(f, res->job.id, res->job.generation, res->job.change_generation);
        if (failure)
                *failure = f->failures[--f->n_failures];  /* read at last */
        /* Room for the map's growth before it grows. */
        growth = extent_map_growth(&f->cached.map, res->job.id, res->extents, res->n_extents);
        pthread_mutex_lock(&s->lock);
        fits = f->map_memory + growth + f->held <= s->max_memory;
        if (fits)
                f->map_memory += growth;
        pthread_mutex_unlock(&s->lock);
        if (!fits) {
                free(res->extents);
                scan_fs_too_big(s, f);
                return true;
        }
        log_debug("Read the tree of subvolume %" PRIu64 " of %s: %" PRIu64 " inode(s), %zu extent(s), in %zu bytes.",
                  res->job.id, uuid_format(f->cached.uuid, buf), res->inodes, res->n_extents, res->peak);
        r = extent_map_set_user(&f->cached.map, res->job.id, res->job.generation, res->job.change_generation,
                                res->inodes, res->finished_usec, res->extents, res->n_extents);
        scan_fs_publish(s, f);
        if (r < 0)
                return false;
        /* A subvolume's root item takes the generation of the transaction
         * that changed it when that commits, so a change in the running
         * transaction shows up then; except in a subvolume created in that
         * very transaction, whose generation already is that one: read it
         * again once the root tree shows a commit (its fingerprint moved). */
        ExtentUser *u = (ExtentUser *) extent_map_find_user(&f->cached.map, res->job.id);
        u->tentative = res->job.creation_generation >= res->job.fs_generation;
        u->tentative_fingerprint = res->job.fs_fingerprint;
        s->unsaved = true;
        f->derived_stale = true;
        f->batch++;
        f->batch_end = res->finished_mono;
        return true;
}

/* Folds the finished scans into the extent maps. */
static bool scanner_take_results(Scanner *s) {
        Result *results;
        size_t n;
        bool changed = false;

        pthread_mutex_lock(&s->lock);
        results = s->results;
        n = s->n_results;
        s->results = NULL;
        s->n_results = s->allocated_results = 0;
        pthread_mutex_unlock(&s->lock);

        for (size_t i = 0; i < n; i++) {
                Result *res = &results[i];
                ScanFs *f = scan_fs_find(s, res->job.uuid);

                if (f && !f->too_big)
                        changed = scan_fs_fold(s, f, res) || changed;
                else
                        free(res->extents);
                pthread_mutex_lock(&s->lock);
                held_release(s, res->job.uuid, res->held);
                pthread_mutex_unlock(&s->lock);
                free(res->job.point);
        }
        free(results);
        return changed;
}

/* A mount through which the worker can read @fs. */
static const Mount *filesystem_mount(const Model *model, const Filesystem *fs) {
        for (size_t i = 0; i < model->mounts.n_mounts; i++)
                if (model->mount_filesystem[i] == fs && mount_table_is_reachable(&model->mounts, &model->mounts.mounts[i]))
                        return &model->mounts.mounts[i];
        return NULL;
}

/* Whether @sv's tree failed as it is now and is not due to be read again. */
static bool failed_before(const ScanFs *f, const Subvolume *sv, uint64_t now) {
        const Failure *failure = failure_of(f, sv->id, sv->generation, sv->change_generation);

        return failure && now < failure->retry_usec;
}

static void job_list_done(JobList *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->jobs[i].point);
        free(l->jobs);
}

static void job_add(JobList *l, const Mount *m, const Model *model, const Filesystem *fs, ScanFs *f,
                    const Subvolume *sv) {
        Job job;

        if (!m || grow_array(&l->jobs, &l->allocated, l->n + 1, sizeof(Job)) < 0)
                return;
        job = (Job) { .point = strdup(m->point), .mount_id = m->id, .dev_major = m->dev_major,
                      .dev_minor = m->dev_minor, .source = model->mounts.source, .id = sv->id,
                      .generation = sv->generation, .change_generation = sv->change_generation,
                      .creation_generation = sv->creation_generation,
                      .fs_generation = fs->generation, .fs_fingerprint = fs->root_fingerprint };
        if (!job.point)
                return;
        memcpy(job.uuid, fs->uuid, 16);
        l->jobs[l->n++] = job;
        f->queued = true;
}

/* Under lock: appends @l to the queue (emptying @l) and wakes the worker. */
static void jobs_submit(Scanner *s, JobList *l) {
        if (l->n == 0)
                return;
        if (s->first_job > 0 && s->n_jobs + l->n > s->allocated_jobs) {
                /* Reuse the room of the jobs taken before growing. */
                s->n_jobs -= s->first_job;
                memmove(s->jobs, s->jobs + s->first_job, s->n_jobs * sizeof(Job));
                s->first_job = 0;
        }
        if (grow_array(&s->jobs, &s->allocated_jobs, s->n_jobs + l->n, sizeof(Job)) < 0)
                return;  /* queued again by the next update */
        memcpy(s->jobs + s->n_jobs, l->jobs, l->n * sizeof(Job));
        s->n_jobs += l->n;
        l->n = 0;
        pthread_cond_signal(&s->more);
}

/* Hands the jobs of the last update to the worker. */
static void scanner_hand_off(Scanner *s) {
        uint64_t now;

        if (s->ready.n == 0)
                return;
        pthread_mutex_lock(&s->lock);
        now = clock_usec(CLOCK_MONOTONIC);
        jobs_submit(s, &s->ready);
        pthread_mutex_unlock(&s->lock);
        job_list_done(&s->ready);  /* what could not be handed over is queued again by the next update */
        s->ready = (JobList) {};
        /* A run starts when its first trees are handed to the worker. */
        for (size_t i = 0; i < s->n_fss; i++) {
                ScanFs *f = &s->fss[i];
                if (f->queued && f->batch == 0 && f->batch_start == 0)
                        f->batch_start = now;
                f->queued = false;
        }
}

static int on_hand_off(sd_event_source *source, void *userdata) {
        scanner_hand_off(userdata);
        return 0;
}

typedef struct SnapshotLink {
        size_t source, snapshot;  /* indexes in the filesystem's subvolumes */
} SnapshotLink;

static int cmp_link(const void *a, const void *b) {
        const SnapshotLink *x = a, *y = b;

        return x->source < y->source ? -1 : x->source > y->source ? 1 :
               x->snapshot < y->snapshot ? -1 : x->snapshot > y->snapshot;
}

/* Puts every measured subvolume of @fs into the family of its snapshot
 * source in the map of @f: O(subvolumes) when nothing changed, plus the
 * extents of each one that moved. */
static void scan_fs_set_families(ScanFs *f, const Filesystem *fs) {
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                const Subvolume *sv = &fs->subvolumes[i];

                /* On failure it is in no family, and its source's figure
                 * unknown (scan_fs_derive() checks). */
                if (extent_map_set_family(&f->cached.map, sv->id, sv->snapshot_source ? sv->snapshot_source->id : 0) != 0)
                        f->derived_stale = true;
        }
}

/* Derives every subvolume's WrittenBytes and SnapshotsExclusiveBytes from
 * the map of @f (complete for @fs) and the snapshot links of @fs.  The
 * map keeps each family's exclusive bytes with every reference that
 * comes or goes (extent-map.h); WrittenBytes is a merge walk of a
 * subvolume's list with its newest snapshot's, done again only when one
 * of the two lists, or which snapshot is the newest, changed.  So
 * O(subvolumes) plus what changed, not O(references).  Run when the map
 * changed and every subvolume is measured: the figures are those of one
 * complete state. */
static int scan_fs_derive(ScanFs *f, const Filesystem *fs) {
        _cleanup_free_ SnapshotLink *links = NULL;
        _cleanup_free_ bool *has_snapshots = NULL;
        ExtentMap *map = &f->cached.map;
        size_t n = 0;

        links = calloc(fs->n_subvolumes ?: 1, sizeof(SnapshotLink));
        has_snapshots = calloc(fs->n_subvolumes ?: 1, sizeof(bool));
        if (!links || !has_snapshots)
                return -ENOMEM;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                const Subvolume *sv = &fs->subvolumes[i];

                if (!sv->snapshot_source)
                        continue;
                links[n] = (SnapshotLink) { (size_t) (sv->snapshot_source - fs->subvolumes), i };
                has_snapshots[links[n++].source] = true;
        }
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                ExtentUser *u = (ExtentUser *) extent_map_find_user(map, fs->subvolumes[i].id);

                /* No snapshot: all it references is written since, and
                 * no snapshot of it costs anything. */
                if (u && !has_snapshots[i]) {
                        u->written = u->referenced;
                        u->snapshots_exclusive = 0;
                }
        }
        qsort(links, n, sizeof(SnapshotLink), cmp_link);
        for (size_t i = 0, end; i < n; i = end) {
                const Subvolume *source = &fs->subvolumes[links[i].source], *newest = NULL;
                ExtentUser *u = (ExtentUser *) extent_map_find_user(map, source->id);
                const ExtentUser *newest_user;
                ExtentFamily *family;
                bool complete = true;

                for (end = i; end < n && links[end].source == links[i].source; end++) {
                        const Subvolume *snapshot = &fs->subvolumes[links[end].snapshot];
                        const ExtentUser *su = extent_map_find_user(map, snapshot->id);

                        /* The newest by creation generation; ids break
                         * ties (two snapshots in one transaction). */
                        if (!newest || snapshot->creation_generation > newest->creation_generation ||
                            (snapshot->creation_generation == newest->creation_generation && snapshot->id > newest->id))
                                newest = snapshot;
                        if (!su || extent_user_family_source(map, su) != source->id)
                                complete = false;  /* not measured, or in no family (see above) */
                }
                if (!u)
                        continue;
                newest_user = extent_map_find_user(map, newest->id);
                family = extent_map_family(map, source->id);
                if (!newest_user)
                        u->written = UINT64_MAX;
                else if (family && family->written_newest == newest->id && family->written_version == u->list_version &&
                         family->written_newest_version == newest_user->list_version)
                        u->written = family->written;  /* both lists as they were */
                else {
                        u->written = extent_map_written_since(u, newest_user);
                        if (family)
                                *family = (ExtentFamily) { family->source, family->members, family->exclusive,
                                                           u->written, newest->id, u->list_version,
                                                           newest_user->list_version };
                }
                u->snapshots_exclusive = complete ? extent_map_family_exclusive(map, source->id) : UINT64_MAX;
        }
        f->derived_stale = false;
        return 0;
}

/* Arms the retry timer for the earliest failure not due yet at @now. */
static void scanner_arm_retry(Scanner *s, uint64_t now) {
        uint64_t next = UINT64_MAX;

        for (size_t i = 0; i < s->n_fss; i++)
                for (size_t j = 0; j < s->fss[i].n_failures; j++)
                        if (s->fss[i].failures[j].retry_usec > now)
                                next = MIN(next, s->fss[i].failures[j].retry_usec);
        if (next == UINT64_MAX) {
                (void) sd_event_source_set_enabled(s->retry_timer, SD_EVENT_OFF);
                return;
        }
        if (sd_event_source_set_time(s->retry_timer, next) < 0 ||
            sd_event_source_set_enabled(s->retry_timer, SD_EVENT_ONESHOT) < 0)
                log_warning("Cannot arm the timer for reading failed subvolume trees again; they are read when they change.");
}

bool scanner_update(Scanner *s, Model *model) {
        uint64_t now = clock_usec(CLOCK_MONOTONIC);
        bool changed, run_done = false;
        JobList new = {};

        scanner_wait_loaded(s);
        /* Anything the last update made goes first, so that nothing is
         * made twice. */
        scanner_hand_off(s);
        changed = scanner_take_results(s);

        for (size_t i = 0; i < s->n_fss; i++)
                s->fss[i].seen = false;
        for (size_t i = 0; i < model->n_filesystems; i++) {
                Filesystem *fs = model->filesystems[i];
                _cleanup_free_ uint64_t *pending = NULL;
                size_t done = 0, failed = 0, n_pending = 0;
                const Mount *mount;
                ScanFs *f;

                fs->scan_progress = 1.0;
                if (fs->quota_mode != QUOTA_MODE_DISABLED)
                        continue;  /* btrfs counts: nothing to measure */
                f = scan_fs_get(s, fs->uuid);
                if (!f)
                        continue;
                f->seen = true;
                if (f->too_big) {
                        /* Figures of trees read before, carried over by the model. */
                        for (size_t j = 0; j < fs->n_subvolumes; j++)
                                if (fs->subvolumes[j].usage.source == USAGE_SOURCE_SCAN)
                                        fs->subvolumes[j].usage = USAGE_NONE;
                        continue;
                }
                /* Forget subvolumes that were deleted: what they shared may
                 * be exclusive to others now. */
                for (size_t j = f->cached.map.n_users; j-- > 0;)
                        if (!filesystem_find_subvolume(fs, f->cached.map.users[j].id)) {
                                extent_map_remove_user(&f->cached.map, f->cached.map.users[j].id);
                                scan_fs_publish(s, f);
                                f->derived_stale = true;
                                changed = true;
                        }
                /* ... and failures that no longer apply. */
                for (size_t j = f->n_failures; j-- > 0;) {
                        const Subvolume *sv = filesystem_find_subvolume(fs, f->failures[j].id);
                        if (!sv || sv->generation != f->failures[j].generation ||
                            sv->change_generation != f->failures[j].change_generation)
                                f->failures[j] = f->failures[--f->n_failures];
                }
                mount = filesystem_mount(model, fs);
                pthread_mutex_lock(&s->lock);
                if (pending_ids(s, fs->uuid, &pending, &n_pending) < 0)
                        mount = NULL;  /* queue nothing this time */
                pthread_mutex_unlock(&s->lock);
                for (size_t j = 0; j < fs->n_subvolumes; j++) {
                        Subvolume *sv = &fs->subvolumes[j];
                        const ExtentUser *u = extent_map_find_user(&f->cached.map, sv->id);
                        bool current = u && u->generation == sv->generation &&
                                       u->change_generation == sv->change_generation &&
                                       !(u->tentative && u->tentative_fingerprint != fs->root_fingerprint);

                        if (u) {
                                /* Figures of a tree that changed since (also
                                 * while subvold was not running) are those of
                                 * an older state until it is read again: not
                                 * consistent, as qgroups during a rescan. */
                                sv->logical_referenced_bytes = u->logical_referenced;
                                sv->usage = (Usage) {
                                        .referenced = u->referenced, .exclusive = u->exclusive, .inodes = u->inodes,
                                        .referenced_limit = USAGE_UNKNOWN, .exclusive_limit = USAGE_UNKNOWN,
                                        .source = USAGE_SOURCE_SCAN, .consistent = current,
                                        .updated_usec = u->scanned_usec,
                                };
                        }
                        if (current)
                                done++;
                        else if (failed_before(f, sv, now))
                                failed++;  /* not read again until it changes or its retry is due */
                        else if (!(n_pending && bsearch(&sv->id, pending, n_pending, sizeof(uint64_t), cmp_u64)))
                                job_add(&new, mount, model, fs, f, sv);
                }
                fs->scan_progress = fs->n_subvolumes ? (double) done / (double) fs->n_subvolumes : 1.0;
                /* Until every subvolume is measured (or failed: read
                 * again when it changes or its retry is due), the figures
                 * of the last complete state stay. */
                scan_fs_set_families(f, fs);
                if (done + failed == fs->n_subvolumes && f->derived_stale && scan_fs_derive(f, fs) < 0)
                        log_warning("Out of memory deriving the snapshot figures; tried again with the next update.");
                for (size_t j = 0; j < fs->n_subvolumes; j++) {
                        Subvolume *sv = &fs->subvolumes[j];
                        const ExtentUser *u = extent_map_find_user(&f->cached.map, sv->id);

                        if (u) {
                                sv->written_bytes = u->written;
                                sv->snapshots_exclusive_bytes = u->snapshots_exclusive;
                        }
                }
                if (done == fs->n_subvolumes && f->batch > 0) {
                        char buf[UUID_STRING_MAX];
                        log_info("Measured the usage of %zu subvolume(s) of %s in %.2f ms.", f->batch,
                                 uuid_format(fs->uuid, buf), (double) (f->batch_end - f->batch_start) / 1000);
                        f->batch = 0;
                        f->batch_start = 0;
                        run_done = true;
                        /* The queue and the results of a large run are
                         * gone now: give their memory back. */
                        malloc_trim(0);
                }
        }
        pthread_mutex_lock(&s->lock);
        /* Filesystems that went away (or turned quotas on). */
        for (size_t i = s->n_fss; i-- > 0;) {
                if (s->fss[i].seen)
                        continue;
                jobs_cancel(s, s->fss[i].cached.uuid);
                extent_map_done(&s->fss[i].cached.map);
                free(s->fss[i].failures);
                s->fss[i] = s->fss[--s->n_fss];
        }
        pthread_mutex_unlock(&s->lock);
        /* Only now: the array of maps does not move any more in this
         * update. */
        for (size_t i = 0; i < model->n_filesystems; i++) {
                Filesystem *fs = model->filesystems[i];
                ScanFs *f = fs->quota_mode == QUOTA_MODE_DISABLED ? scan_fs_find(s, fs->uuid) : NULL;

                fs->extent_map = f && !f->too_big ? &f->cached.map : NULL;
        }
        scanner_arm_retry(s, now);
        s->ready = new;
        if (s->ready.n > 0 && sd_event_source_set_enabled(s->hand_off, SD_EVENT_ONESHOT) < 0)
                scanner_hand_off(s);
        /* Written when a filesystem is complete, not after every tree. */
        if (run_done)
                scanner_save(s);
        return changed;
}

void scanner_mounts_changed(Scanner *s, MountSource source) {
        uint64_t mount_id;
        unsigned major, minor;
        bool busy, found = false;
        MountTable t;

        pthread_mutex_lock(&s->lock);
        s->mount_epoch++;
        if (!s->worker_fd_busy)
                worker_fd_close(s);
        /* A job that has not gone for its mount yet (waiting for a CPU,
         * or in a test's pause) holds nothing: worker_open() finds out. */
        busy = s->busy && s->current_opened;
        mount_id = s->current.mount_id;
        major = s->current.dev_major;
        minor = s->current.dev_minor;
        pthread_mutex_unlock(&s->lock);
        if (!busy)
                return;
        /* Is the mount the worker reads through still there, on the same
         * superblock (ids are reused)?  Reading on would keep an unmounted
         * filesystem alive. */
        if (mount_table_read(source, &t) >= 0) {
                for (size_t i = 0; i < t.n_mounts && !found; i++)
                        found = t.mounts[i].id == mount_id && t.mounts[i].dev_major == major &&
                                t.mounts[i].dev_minor == minor;
                mount_table_done(&t);
        }
        if (found)
                return;
        pthread_mutex_lock(&s->lock);
        if (s->busy && s->current_opened && s->current.mount_id == mount_id) {
                s->cancel_current = true;
                worker_wake(s);
        }
        pthread_mutex_unlock(&s->lock);
}
