/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.subvold.Subvold1.Files: file identity, previous versions and
 * deleted files.  A handler checks the caller's fds and credentials in the
 * event loop, takes from the model what the work needs, and hands it to a
 * worker thread (versions.h: tree searches, opens as the caller, a family
 * of any size); the reply is sent from the event loop when the work is
 * done. */

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include "bus-files.h"
#include "bus-manager.h"
#include "bus-objects.h"
#include "bus-util.h"
#include "util.h"
#include "versions.h"

#define SUBVOLD_IFACE_FILES "org.subvold.Subvold1.Files"

/* Calls waiting for the worker, at the most: past that, LimitsExceeded. */
#define FILES_MAX_PENDING 64

typedef enum FilesOp {
        FILES_IDENTITY,
        FILES_COMPARE,
        FILES_LIST_VERSIONS,
        FILES_OPEN_VERSION,
        FILES_LIST_DELETED,
        FILES_OPEN_DELETED,
} FilesOp;

/* One of the caller's files, as the event loop found it. */
typedef struct FileRef {
        int fd;                  /* our own duplicate, closed by the worker */
        uint8_t fsid[16];
        uint64_t subvolume, ino;
        uint8_t family[16];      /* the family root's UUID */
        uint64_t family_root;
        Mount mount;             /* one to reach the filesystem through */
        MountSource source;
        uint64_t *members;       /* the rest of the family, oldest first */
        size_t n_members;
        BtrfsInode inode;        /* filled in by the worker */
} FileRef;

typedef struct FilesJob {
        struct FilesJob *next;    /* in the queue or the done list */
        FilesOp op;
        struct BusFiles *owner;
        sd_bus_message *message;  /* the call; touched in the event loop only */
        Caller caller;
        FileRef files[2];
        size_t n_files;
        bool all;
        uint64_t member;          /* for the Open* calls */
        char *name;               /* for OpenDeletedFile */
        /* results */
        int error;
        FileVersion *versions;
        size_t n_versions;
        DeletedFile *deleted;
        size_t n_deleted;
        int result_fd;
} FilesJob;

struct BusFiles {
        Model **model;
        sd_event_source *done_source;
        int done_fd;
        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t more;
        bool stop;
        /* Under lock; lists, so that handing a job on never fails. */
        FilesJob *queue, **queue_tail, *done;
        size_t pending;            /* event loop: queued, running or done, not replied to */
};

static void file_ref_done(FileRef *f) {
        closep(&f->fd);
        free(f->mount.point);
        free(f->members);
}

static void files_job_free(FilesJob *j) {
        if (!j)
                return;
        sd_bus_message_unref(j->message);
        caller_done(&j->caller);
        for (size_t i = 0; i < j->n_files; i++)
                file_ref_done(&j->files[i]);
        free(j->name);
        file_versions_free(j->versions, j->n_versions);
        deleted_files_free(j->deleted, j->n_deleted);
        closep(&j->result_fd);
        free(j);
}

/* ---- the worker ---- */

/* A directory on the filesystem of @f, through a private clone of its
 * mount, checked to be that filesystem (mount ids are reused). */
static int open_filesystem(const FileRef *f, int *ret) {
        _cleanup_close_ int fd = -1;
        uint8_t fsid[16];
        int r;

        r = btrfs_open_mount(&f->mount, f->source, &fd);
        if (r < 0)
                return r;
        r = btrfs_read_fsid(fd, fsid);
        if (r < 0)
                return r;
        if (memcmp(fsid, f->fsid, 16) != 0)
                return -ESTALE;
        *ret = TAKE_FD(fd);
        return 0;
}

static int run_job(FilesJob *j) {
        _cleanup_close_ int fs_fd = -1;
        FileRef *f = &j->files[0];
        VersionsQuery q;
        int r;

        for (size_t i = 0; i < j->n_files; i++) {
                _cleanup_close_ int fd = -1;

                r = open_filesystem(&j->files[i], &fd);
                if (r < 0)
                        return r;
                q = (VersionsQuery) { .file_fd = j->files[i].fd, .fs_fd = fd, .subvolume = j->files[i].subvolume,
                                      .ino = j->files[i].ino };
                r = versions_current(&q, &j->files[i].inode);
                if (r < 0)
                        return r;
                if (i == 0)
                        fs_fd = TAKE_FD(fd);
        }
        q = (VersionsQuery) { .file_fd = f->fd, .fs_fd = fs_fd, .mount = &f->mount, .source = f->source, .fsid = f->fsid,
                              .subvolume = f->subvolume, .ino = f->ino, .members = f->members,
                              .n_members = f->n_members, .caller = &j->caller };
        switch (j->op) {
        case FILES_LIST_VERSIONS:
                return versions_list(&q, j->all, &j->versions, &j->n_versions);
        case FILES_OPEN_VERSION:
                return versions_open(&q, j->member, &j->result_fd);
        case FILES_LIST_DELETED:
                return versions_deleted(&q, &j->deleted, &j->n_deleted);
        case FILES_OPEN_DELETED:
                return versions_open_deleted(&q, j->name, j->member, &j->result_fd);
        default:
                return 0;  /* the identities are all there is to it */
        }
}

static void *worker(void *userdata) {
        BusFiles *b = userdata;
        uint64_t one = 1;

        (void) pthread_setname_np(pthread_self(), "subvold-files");
        pthread_mutex_lock(&b->lock);
        for (;;) {
                FilesJob *j;

                while (!b->stop && !b->queue)
                        pthread_cond_wait(&b->more, &b->lock);
                if (b->stop)
                        break;
                j = b->queue;
                b->queue = j->next;
                if (!b->queue)
                        b->queue_tail = &b->queue;
                pthread_mutex_unlock(&b->lock);

                j->error = run_job(j);
                /* The caller's files are closed here, not in the loop: a
                 * close may wait. */
                for (size_t i = 0; i < j->n_files; i++)
                        closep(&j->files[i].fd);

                pthread_mutex_lock(&b->lock);
                j->next = b->done;
                b->done = j;
                (void) write(b->done_fd, &one, sizeof one);
        }
        pthread_mutex_unlock(&b->lock);
        return NULL;
}

/* ---- keys ---- */

/* Key and LineageKey: opaque to clients, stable across restarts. */
static void format_keys(const FileRef *f, char key[static 128], char lineage[static 128]) {
        char fsid[UUID_HEX_MAX], family[UUID_HEX_MAX];

        uuid_format_hex(f->fsid, fsid);
        uuid_format_hex(f->family, family);
        snprintf(key, 128, "%s-%" PRIu64 "-%" PRIu64 "-%" PRIu64, fsid, f->subvolume, f->inode.ino,
                 f->inode.generation);
        /* The family by its root's UUID; a root without one (the top level
         * of an old filesystem) by its id. */
        if (uuid_is_null(f->family))
                snprintf(family, sizeof family, "r%" PRIu64, f->family_root);
        snprintf(lineage, 128, "%s-%s-%" PRIu64 "-%" PRIu64, fsid, family, f->inode.ino, f->inode.generation);
}

/* ---- replies, in the event loop ---- */

static const Subvolume *member_of(const Model *model, const FileRef *f, uint64_t id) {
        const Filesystem *fs = model ? model_find_filesystem(model, f->fsid) : NULL;

        return fs ? filesystem_find_subvolume(fs, id) : NULL;
}

static int append_identity(sd_bus_message *m, const Model *model, const FileRef *f) {
        const Subvolume *sv = member_of(model, f, f->subvolume);
        char key[128], lineage[128], fs_path[BUS_OBJECT_PATH_MAX], sv_path[BUS_OBJECT_PATH_MAX];

        if (!sv)
                return -ENOENT;
        format_keys(f, key, lineage);
        return sd_bus_message_append(m, "a{sv}", 7,
                                     "Filesystem", "o", bus_filesystem_path(sv->filesystem, fs_path),
                                     "Subvolume", "o", bus_subvolume_path(sv, sv_path),
                                     "Inode", "t", f->inode.ino,
                                     "InodeGeneration", "t", f->inode.generation,
                                     "ChangeTime", "t", f->inode.ctime_usec,
                                     "Key", "s", key,
                                     "LineageKey", "s", lineage);
}

static int append_versions(sd_bus_message *m, const Model *model, const FilesJob *j) {
        int r = sd_bus_message_open_container(m, 'a', "a{sv}");

        for (size_t i = 0; r >= 0 && i < j->n_versions; i++) {
                const FileVersion *v = &j->versions[i];
                const Subvolume *sv = member_of(model, &j->files[0], v->member);
                char buf[BUS_OBJECT_PATH_MAX];

                if (!sv)
                        continue;  /* deleted meanwhile */
                r = sd_bus_message_open_container(m, 'a', "{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(m, "{sv}{sv}", "Snapshot", "o", bus_subvolume_path(sv, buf),
                                                  "SnapshotTime", "t", sv->creation_usec);
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", "Path");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "ay");
                if (r >= 0)
                        r = bus_append_bytestring(m, v->path);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}{sv}", "Match", "s",
                                                  v->by_inode ? "inode" : "path", "Inode", "t", v->inode.ino, "Size",
                                                  "t", v->inode.size, "ModificationTime", "t", v->inode.mtime_usec,
                                                  "ChangeTime", "t", v->inode.ctime_usec, "SameAsCurrent", "b",
                                                  (int) v->same_as_current);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static const char *file_type_name(uint8_t type) {
        return type == 1 ? "file" : type == 2 ? "directory" : type == 7 ? "symlink" : "other";
}

static int append_deleted(sd_bus_message *m, const Model *model, const FilesJob *j) {
        int r = sd_bus_message_open_container(m, 'a', "a{sv}");

        for (size_t i = 0; r >= 0 && i < j->n_deleted; i++) {
                const DeletedFile *d = &j->deleted[i];
                const Subvolume *sv = member_of(model, &j->files[0], d->member);
                char buf[BUS_OBJECT_PATH_MAX];

                if (!sv)
                        continue;
                r = sd_bus_message_open_container(m, 'a', "{sv}");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", "Name");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "ay");
                if (r >= 0)
                        r = bus_append_bytestring(m, d->name);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}", "Type", "s", file_type_name(d->type),
                                                  "Snapshot", "o", bus_subvolume_path(sv, buf), "SnapshotTime", "t",
                                                  sv->creation_usec, "Size", "t", d->inode.size, "ModificationTime",
                                                  "t", d->inode.mtime_usec);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static int reply_error(const FilesJob *j) {
        int e = -j->error;

        if (e == ENOENT || e == ESTALE)
                return sd_bus_reply_method_errorf(j->message, SUBVOLD_ERROR_NOT_FOUND,
                                                  j->op == FILES_OPEN_VERSION || j->op == FILES_OPEN_DELETED ?
                                                  "That snapshot holds no such file that you may read." :
                                                  "The file is gone, or its filesystem is no longer mounted.");
        if (e == ENOTDIR)
                return sd_bus_reply_method_errorf(j->message, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                  "The file descriptor must refer to a directory.");
        if (e == EISDIR)
                return sd_bus_reply_method_errorf(j->message, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                  "The file descriptor must refer to a regular file.");
        return sd_bus_reply_method_errorf(j->message, SUBVOLD_ERROR_FAILED, "Reading the snapshots failed: %s",
                                          strerror(e));
}

static int reply(BusFiles *b, FilesJob *j) {
        _cleanup_(sd_bus_message_unrefp_) sd_bus_message *m = NULL;
        const Model *model = *b->model;
        int r;

        if (j->error < 0)
                return reply_error(j);
        r = sd_bus_message_new_method_return(j->message, &m);
        if (r < 0)
                return r;
        switch (j->op) {
        case FILES_IDENTITY:
                r = append_identity(m, model, &j->files[0]);
                break;
        case FILES_COMPARE: {
                char ka[128], la[128], kb[128], lb[128];

                format_keys(&j->files[0], ka, la);
                format_keys(&j->files[1], kb, lb);
                r = sd_bus_message_append(m, "s", streq(ka, kb) ? "same" : streq(la, lb) ? "same-lineage" : "different");
                break;
        }
        case FILES_LIST_VERSIONS:
                r = append_versions(m, model, j);
                break;
        case FILES_LIST_DELETED:
                r = append_deleted(m, model, j);
                break;
        case FILES_OPEN_VERSION:
        case FILES_OPEN_DELETED:
                r = sd_bus_message_append(m, "h", j->result_fd);
                break;
        }
        if (r == -ENOENT) {
                j->error = -ENOENT;
                return reply_error(j);
        }
        if (r < 0)
                return r;
        return sd_bus_send(NULL, m, NULL);
}

static int on_done(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        BusFiles *b = userdata;
        FilesJob *done, *next;
        uint64_t x;

        (void) read(fd, &x, sizeof x);
        pthread_mutex_lock(&b->lock);
        done = b->done;
        b->done = NULL;
        pthread_mutex_unlock(&b->lock);
        for (FilesJob *j = done; j; j = next) {
                int r = reply(b, j);
                if (r < 0)
                        log_warning_errno(r, "Failed to reply to a Files call: %m");
                next = j->next;
                files_job_free(j);
                b->pending--;
        }
        return 0;
}

/* ---- the calls ---- */

/* Checks one of the caller's fds and fills in what the worker needs from
 * the model: its filesystem, subvolume, inode, a mount, the family. */
static int file_ref_init(const Model *model, int fd, FileRef *f, mode_t *ret_mode, sd_bus_error *error) {
        const Subvolume *sv, *root;
        const Filesystem *fs;
        FdIdentity id;
        size_t n = 0;
        int flags, r;

        /* The caller proves it may read the file now with the fd itself. */
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || (flags & O_PATH) || (flags & O_ACCMODE) == O_WRONLY)
                return sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                        "The file descriptor must be open for reading (not O_PATH, not "
                                        "write-only).");
        r = bus_lookup_subvolume_by_fd(model, fd, &sv, &id, error);
        if (r < 0)
                return r;
        fs = sv->filesystem;
        *f = (FileRef) { .fd = fcntl(fd, F_DUPFD_CLOEXEC, 3), .subvolume = sv->id, .ino = id.ino,
                         .source = model->mounts.source };
        if (f->fd < 0)
                return -errno;
        memcpy(f->fsid, fs->uuid, 16);
        root = sv->family_root ?: sv;
        memcpy(f->family, root->uuid, 16);
        f->family_root = root->id;
        for (size_t i = 0; i < model->mounts.n_mounts && !f->mount.point; i++)
                if (model->mount_filesystem[i] == fs &&
                    mount_table_is_reachable(&model->mounts, &model->mounts.mounts[i])) {
                        f->mount = (Mount) { .id = model->mounts.mounts[i].id,
                                             .point = strdup(model->mounts.mounts[i].point) };
                        if (!f->mount.point)
                                return -ENOMEM;
                }
        if (!f->mount.point)
                return sd_bus_error_set(error, SUBVOLD_ERROR_NOT_FOUND,
                                        "The file's filesystem is not mounted in subvold's mount namespace.");
        f->members = calloc(fs->n_subvolumes ?: 1, sizeof(uint64_t));
        if (!f->members)
                return -ENOMEM;
        for (size_t i = 0; i < fs->n_subvolumes; i++) {
                const Subvolume *m = &fs->subvolumes[i];
                if (m != sv && (m->family_root ?: m) == root)
                        f->members[n++] = m->id;
        }
        f->n_members = n;
        *ret_mode = id.mode;
        return 0;
}

static int cmp_member_age(const void *a, const void *b, void *userdata) {
        const Filesystem *fs = userdata;
        const Subvolume *x = filesystem_find_subvolume(fs, *(const uint64_t *) a);
        const Subvolume *y = filesystem_find_subvolume(fs, *(const uint64_t *) b);

        if (x->creation_usec != y->creation_usec)
                return x->creation_usec < y->creation_usec ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

/* Hands @j to the worker; the reply comes from on_done(). */
static void job_queue(BusFiles *b, FilesJob *j) {
        pthread_mutex_lock(&b->lock);
        j->next = NULL;
        *b->queue_tail = j;
        b->queue_tail = &j->next;
        pthread_cond_signal(&b->more);
        pthread_mutex_unlock(&b->lock);
}

/* The caller's uid and every group (primary and supplementary), as the bus
 * vouches for them (GetConnectionCredentials, asked without waiting);
 * never guessed from /proc or /etc/group. */
static int on_credentials(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        FilesJob *j = userdata;
        BusFiles *b = j->owner;
        bool have_uid = false, have_groups = false;
        int r;

        /* The job is ours from here: the slot's destroy callback must not
         * free it. */
        (void) sd_bus_slot_set_userdata(sd_bus_get_current_slot(sd_bus_message_get_bus(reply)), NULL);

        r = sd_bus_message_is_method_error(reply, NULL) ? -EIO : sd_bus_message_enter_container(reply, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
                const char *key;

                r = sd_bus_message_read(reply, "s", &key);
                if (r >= 0 && streq(key, "UnixUserID")) {
                        r = sd_bus_message_read(reply, "v", "u", &j->caller.uid);
                        have_uid = r >= 0;
                } else if (r >= 0 && streq(key, "UnixGroupIDs")) {
                        const void *groups;
                        size_t size = 0;

                        r = sd_bus_message_enter_container(reply, 'v', "au");
                        if (r >= 0)
                                r = sd_bus_message_read_array(reply, 'u', &groups, &size);
                        if (r >= 0 && size > 0 && !(j->caller.groups = memdup(groups, size)))
                                r = -ENOMEM;
                        j->caller.n_groups = size / sizeof(gid_t);
                        if (r >= 0)
                                r = sd_bus_message_exit_container(reply);
                        have_groups = r >= 0;
                } else if (r >= 0)
                        r = sd_bus_message_skip(reply, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        if (r < 0 || !have_uid || !have_groups) {
                (void) sd_bus_reply_method_errorf(j->message, SUBVOLD_ERROR_ACCESS_DENIED,
                                                  "The bus does not tell subvold your user and groups, which it "
                                                  "needs to check what you may read.");
                files_job_free(j);
                b->pending--;
                return 0;
        }
        /* Which group is the primary one does not matter to a permission
         * check: the fsgid and the list together are all of them. */
        j->caller.gid = j->caller.n_groups > 0 ? j->caller.groups[0] : 65534;
        job_queue(b, j);
        return 0;
}

static void job_destroy(void *userdata) {
        files_job_free(userdata);
}

/* Starts the work on @j: the reply comes later. */
static int submit(BusFiles *b, sd_bus_message *message, FilesJob *j, sd_bus_error *error) {
        sd_bus_slot *slot;
        int r;

        if (b->pending >= FILES_MAX_PENDING) {
                files_job_free(j);
                return sd_bus_error_set(error, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                        "Too many calls are waiting for subvold to read snapshots; try again "
                                        "later.");
        }
        j->message = sd_bus_message_ref(message);
        j->owner = b;
        b->pending++;
        if (j->op == FILES_IDENTITY || j->op == FILES_COMPARE) {
                job_queue(b, j);
                return 1;
        }
        r = sd_bus_call_method_async(sd_bus_message_get_bus(message), &slot, "org.freedesktop.DBus",
                                     "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetConnectionCredentials",
                                     on_credentials, j, "s", sd_bus_message_get_sender(message));
        if (r < 0) {
                files_job_free(j);
                b->pending--;
                return r;
        }
        /* Unanswered when the bus goes away, the job is freed with the
         * slot. */
        (void) sd_bus_slot_set_destroy_callback(slot, job_destroy);
        (void) sd_bus_slot_set_floating(slot, true);  /* takes a reference of its own */
        sd_bus_slot_unref(slot);
        return 1;
}

/* Reads @n fds from @message, checks them, and makes the job. */
static int make_job(BusFiles *b, sd_bus_message *message, FilesOp op, size_t n, bool want_dir, FilesJob **ret,
                    sd_bus_error *error) {
        FilesJob *j = calloc(1, sizeof(FilesJob));
        const Model *model = *b->model;
        int r;

        if (!j)
                return -ENOMEM;
        *j = (FilesJob) { .op = op, .result_fd = -1, .files = { { .fd = -1 }, { .fd = -1 } } };
        for (size_t i = 0; i < n; i++) {
                mode_t mode;
                int fd;

                r = sd_bus_message_read(message, "h", &fd);
                if (r < 0) {
                        files_job_free(j);
                        return sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                                "The call carries no usable file descriptor.");
                }
                r = file_ref_init(model, fd, &j->files[i], &mode, error);
                j->n_files = i + 1;
                if (r >= 0 && op != FILES_IDENTITY && op != FILES_COMPARE && (want_dir ? !S_ISDIR(mode) : !S_ISREG(mode)))
                        r = sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                             want_dir ? "The file descriptor must refer to a directory." :
                                                        "The file descriptor must refer to a regular file.");
                if (r < 0) {
                        files_job_free(j);
                        return r;
                }
        }
        if (op != FILES_IDENTITY && op != FILES_COMPARE) {
                /* Oldest first. */
                qsort_r(j->files[0].members, j->files[0].n_members, sizeof(uint64_t), cmp_member_age,
                        model_find_filesystem(model, j->files[0].fsid));
        }
        *ret = j;
        return 0;
}

/* The member of the file's family that @object names. */
static int read_member(sd_bus_message *message, const Model *model, FilesJob *j, sd_bus_error *error) {
        const FileRef *f = &j->files[0];
        char buf[BUS_OBJECT_PATH_MAX];
        const char *object;
        int r;

        r = sd_bus_message_read(message, "o", &object);
        if (r < 0)
                return r;
        for (size_t i = 0; i < f->n_members; i++) {
                const Subvolume *sv = member_of(model, f, f->members[i]);
                if (sv && streq(object, bus_subvolume_path(sv, buf))) {
                        j->member = sv->id;
                        return 0;
                }
        }
        return sd_bus_error_setf(error, SUBVOLD_ERROR_NOT_FOUND,
                                 "%s is not a snapshot of this file's family (see ListFileVersions).", object);
}

static int method_get_file_identity(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        FilesJob *j;
        int r = make_job(userdata, message, FILES_IDENTITY, 1, false, &j, error);

        return r < 0 ? r : submit(userdata, message, j, error);
}

static int method_compare_files(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        FilesJob *j;
        int r = make_job(userdata, message, FILES_COMPARE, 2, false, &j, error);

        return r < 0 ? r : submit(userdata, message, j, error);
}

static int method_list_file_versions(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        FilesJob *j;
        int r = make_job(userdata, message, FILES_LIST_VERSIONS, 1, false, &j, error);

        if (r < 0)
                return r;
        /* Options: All b. */
        r = sd_bus_message_enter_container(message, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(message, 'e', "sv")) > 0) {
                const char *key;
                int all;

                r = sd_bus_message_read(message, "s", &key);
                if (r >= 0 && streq(key, "All"))
                        r = sd_bus_message_read(message, "v", "b", &all) >= 0 ? (j->all = all, 0) :
                            sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT, "Option All must be a boolean.");
                else if (r >= 0)
                        r = sd_bus_error_setf(error, SUBVOLD_ERROR_INVALID_ARGUMENT, "Unknown option \"%s\".", key);
                if (r >= 0)
                        r = sd_bus_message_exit_container(message);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(message);
        if (r < 0) {
                files_job_free(j);
                return r;
        }
        return submit(userdata, message, j, error);
}

static int method_open_file_version(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusFiles *b = userdata;
        FilesJob *j;
        int r = make_job(b, message, FILES_OPEN_VERSION, 1, false, &j, error);

        if (r >= 0 && (r = read_member(message, *b->model, j, error)) < 0)
                files_job_free(j);
        return r < 0 ? r : submit(b, message, j, error);
}

static int method_list_deleted_files(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        FilesJob *j;
        int r = make_job(userdata, message, FILES_LIST_DELETED, 1, true, &j, error);

        return r < 0 ? r : submit(userdata, message, j, error);
}

static int method_open_deleted_file(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusFiles *b = userdata;
        const void *name;
        size_t len;
        FilesJob *j;
        int r = make_job(b, message, FILES_OPEN_DELETED, 1, true, &j, error);

        if (r < 0)
                return r;
        r = sd_bus_message_read_array(message, 'y', &name, &len);
        /* One name, as the directory holds it: no '/', not "." or "..". */
        if (r >= 0 && len > 0 && ((const char *) name)[len - 1] == 0)
                len--;
        if (r >= 0 && (len == 0 || len > NAME_MAX || memchr(name, 0, len) || memchr(name, '/', len) ||
                       (len == 1 && !memcmp(name, ".", 1)) || (len == 2 && !memcmp(name, "..", 2))))
                r = sd_bus_error_set(error, SUBVOLD_ERROR_INVALID_ARGUMENT,
                                     "The name must be one file name: 1 to 255 bytes, no '/', not . or ..");
        if (r >= 0 && !(j->name = memdup_suffix0(name, len)))
                r = -ENOMEM;
        if (r >= 0)
                r = read_member(message, *b->model, j, error);
        if (r < 0) {
                files_job_free(j);
                return r;
        }
        return submit(b, message, j, error);
}

static const sd_bus_vtable files_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("GetFileIdentity", SD_BUS_ARGS("h", fd), SD_BUS_RESULT("a{sv}", identity),
                                method_get_file_identity, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CompareFiles", SD_BUS_ARGS("h", a, "h", b), SD_BUS_RESULT("s", relation),
                                method_compare_files, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListFileVersions", SD_BUS_ARGS("h", fd, "a{sv}", options),
                                SD_BUS_RESULT("aa{sv}", versions), method_list_file_versions,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenFileVersion", SD_BUS_ARGS("h", fd, "o", snapshot), SD_BUS_RESULT("h", version),
                                method_open_file_version, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListDeletedFiles", SD_BUS_ARGS("h", directory_fd), SD_BUS_RESULT("aa{sv}", entries),
                                method_list_deleted_files, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenDeletedFile", SD_BUS_ARGS("h", directory_fd, "ay", name, "o", snapshot),
                                SD_BUS_RESULT("h", file), method_open_deleted_file, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

int bus_files_new(sd_bus *bus, sd_event *event, Model **model, BusFiles **ret) {
        BusFiles *b = calloc(1, sizeof(BusFiles));
        int r;

        if (!b)
                return -ENOMEM;
        b->model = model;
        b->queue_tail = &b->queue;
        pthread_mutex_init(&b->lock, NULL);
        pthread_cond_init(&b->more, NULL);
        b->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (b->done_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(event, &b->done_source, b->done_fd, EPOLLIN, on_done, b);
        if (r >= 0)
                r = sd_bus_add_object_vtable(bus, NULL, SUBVOLD_MANAGER_PATH, SUBVOLD_IFACE_FILES, files_vtable, b);
        if (r >= 0)
                r = -pthread_create(&b->thread, NULL, worker, b);
        if (r < 0)
                goto fail;
        b->started = true;
        *ret = b;
        return 0;
fail:
        bus_files_free(b);
        return r;
}

BusFiles *bus_files_free(BusFiles *b) {
        if (!b)
                return NULL;
        if (b->started) {
                pthread_mutex_lock(&b->lock);
                b->stop = true;
                pthread_cond_signal(&b->more);
                pthread_mutex_unlock(&b->lock);
                pthread_join(b->thread, NULL);
        }
        for (FilesJob *lists[] = { b->queue, b->done }, **l = lists; l < lists + 2; l++)
                for (FilesJob *j = *l, *next; j; j = next) {
                        next = j->next;
                        files_job_free(j);
                }
        sd_event_source_disable_unref(b->done_source);
        closep(&b->done_fd);
        pthread_cond_destroy(&b->more);
        pthread_mutex_destroy(&b->lock);
        free(b);
        return NULL;
}
