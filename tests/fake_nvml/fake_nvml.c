/*
 * fake_nvml.c - a small stand-in for libnvidia-ml.so.1, for tests and demos only.
 *
 * The real pynvml loads it through LD_LIBRARY_PATH. It simulates GPUs from plain files in the
 * folder named by $FAKE_NVML_DIR, re-read on EVERY call, so a test changes the "hardware" by
 * rewriting a file (format: README.md next to this file). Nothing is cached between calls except
 * the init refcount, the way a real driver keeps its state outside the caller's process.
 *
 * Build flavours: the default exports what current pynvml calls; -DFAKE_NVML_OLD leaves out
 * nvmlDeviceGetMemoryInfo_v2 and nvmlDeviceGetComputeRunningProcesses_v3, like a driver older
 * than those calls (R510), so pynvml raises FunctionNotFound / NVMLLibraryMismatchError.
 * It also leaves out the event API, nvmlDeviceGetFieldValues (the recovery action) and
 * nvmlDeviceGetRemappedRows, so a watcher sees FUNCTION_NOT_FOUND for each, and
 * nvmlDeviceGetCurrentClocksEventReasons (R535), keeping the older ...ThrottleReasons.
 *
 * Xid events: the `events` file is appended to (`gpu=3 type=8 data=79`, one line per event).
 * An event set remembers how many lines existed when it was created: events from before are
 * lost, as with the real driver; nvmlEventSetWait_v2 delivers the next line for a registered
 * device and type, polling the file every SLICE_MS until its timeout.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 64
#define MAX_PROCS 64 /* per GPU; more holders are ignored */
#define STR_LEN 96   /* NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define LINE_LEN 512
#define PATH_LEN 1024
#define MIB 1048576ULL
#define SLICE_MS 20 /* a delay re-reads the faults file this often, so clearing it unwedges */
/* nvmlEventSetWait_v2 polls the events file this often (a real driver sleeps on a wait queue:
 * the stand-in's polling is an artifact, kept rare so an idle watcher costs little here too). */
#define EVENT_SLICE_MS 100

typedef unsigned long long u64;
typedef int nvmlReturn_t;
struct fake_dev { unsigned char unused; };
typedef struct fake_dev *nvmlDevice_t;
typedef struct { u64 total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; u64 total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    u64 usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7,
    DRIVER_NOT_LOADED = 9, GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999
};
#define MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | 2u << 24))

static const struct { int code; const char *name; } ERRORS[] = {
    {0, "SUCCESS"}, {1, "UNINITIALIZED"}, {2, "INVALID_ARGUMENT"}, {3, "NOT_SUPPORTED"},
    {4, "NO_PERMISSION"}, {5, "ALREADY_INITIALIZED"}, {6, "NOT_FOUND"},
    {7, "INSUFFICIENT_SIZE"}, {8, "INSUFFICIENT_POWER"}, {9, "DRIVER_NOT_LOADED"},
    {10, "TIMEOUT"}, {11, "IRQ_ISSUE"}, {12, "LIBRARY_NOT_FOUND"}, {13, "FUNCTION_NOT_FOUND"},
    {14, "CORRUPTED_INFOROM"}, {15, "GPU_IS_LOST"}, {16, "RESET_REQUIRED"},
    {17, "OPERATING_SYSTEM"}, {18, "LIB_RM_VERSION_MISMATCH"}, {19, "IN_USE"}, {20, "MEMORY"},
    {21, "NO_DATA"}, {25, "ARGUMENT_VERSION_MISMATCH"}, {999, "UNKNOWN"},
};

struct gpu {
    unsigned index, util, mem_util, nprocs;
    char uuid[STR_LEN], name[STR_LEN];
    u64 total_mib, base_mib, reserved_mib, procs_mib;
    u64 recovery, remap_pending, remap_failed, dbe; /* fault counters (README: gpus) */
    u64 clocks_event_reasons; /* nvmlDeviceGetCurrentClocksEventReasons bits (README: gpus) */
    unsigned pids[MAX_PROCS];
    u64 pid_mib[MAX_PROCS];
};
struct state { unsigned n; struct gpu gpu[MAX_GPUS]; };

static struct fake_dev handles[MAX_GPUS]; /* a handle is &handles[gpu index] */
static int init_count;

/* ---- small parsing helpers ---------------------------------------------------------------- */

static int state_path(char *out, size_t len, const char *leaf) {
    const char *dir = getenv("FAKE_NVML_DIR");
    if (dir == NULL || dir[0] == '\0') return -1;
    int n = snprintf(out, len, "%s/%s", dir, leaf);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* Does `p` start a `word=` token? Values may contain spaces (name=NVIDIA H200), so a value
 * runs until the next such token. */
static int starts_key(const char *p) {
    const char *q = p;
    while (*q == '_' || islower((unsigned char)*q)) q++;
    return q > p && *q == '=';
}

/* Copy the value of `key` in `line` into `out`; 0 if found. */
static int field(const char *line, const char *key, char *out, size_t len) {
    size_t klen = strlen(key);
    for (const char *p = line; *p; p++) {
        if (p != line && !isspace((unsigned char)p[-1])) continue;
        if (strncmp(p, key, klen) != 0 || p[klen] != '=') continue;
        const char *v = p + klen + 1, *end = v;
        while (*end && *end != '\n' && !(isspace((unsigned char)*end) && starts_key(end + 1)))
            end++;
        while (end > v && isspace((unsigned char)end[-1])) end--;
        size_t n = (size_t)(end - v) < len - 1 ? (size_t)(end - v) : len - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        return 0;
    }
    return -1;
}

/* Like field_u64, but also takes 0x-prefixed hex (clock event reasons are a bit mask). */
static int field_mask(const char *line, const char *key, u64 *out) {
    char buf[32], *end;
    if (field(line, key, buf, sizeof buf) != 0 || !isdigit((unsigned char)buf[0])) return -1;
    errno = 0;
    u64 v = strtoull(buf, &end, 0);
    if (errno != 0 || *end != '\0') return -1;
    *out = v;
    return 0;
}

static int field_u64(const char *line, const char *key, u64 *out) {
    char buf[32], *end;
    if (field(line, key, buf, sizeof buf) != 0 || !isdigit((unsigned char)buf[0])) return -1;
    errno = 0;
    u64 v = strtoull(buf, &end, 10);
    if (errno != 0 || *end != '\0') return -1;
    *out = v;
    return 0;
}

/* Read a line; a line longer than the buffer is cut and its rest skipped. */
static int read_line(FILE *f, char *buf, size_t len) {
    if (fgets(buf, (int)len, f) == NULL) return 0;
    if (strchr(buf, '\n') == NULL) {
        int c;
        while ((c = fgetc(f)) != EOF && c != '\n') {}
    }
    return 1;
}

/* ---- state files -------------------------------------------------------------------------- */

/* The parsed gpus file, kept while the file is unchanged (the same device, inode, size, mtime
 * and ctime), so a call costs a stat instead of an open, a read and a parse. A file is trusted
 * only once its mtime is STABLE_NS old when read: a rewrite within the same timestamp tick (a
 * reused inode, the same size) is then impossible to miss, as git's "racy" index check does. */
#define STABLE_NS 50000000LL
static pthread_mutex_t gpus_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state gpus_cache;
static struct stat gpus_key;
static int gpus_cached;

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int stable(const struct stat *sb) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long age = (long long)(now.tv_sec - sb->st_ctim.tv_sec) * 1000000000LL +
                    (now.tv_nsec - sb->st_ctim.tv_nsec);
    return age > STABLE_NS;
}

static int parse_gpus(struct state *st, FILE *f);

static int load_gpus(struct state *st) {
    char path[PATH_LEN];
    struct stat sb;
    if (state_path(path, sizeof path, "gpus") != 0) return DRIVER_NOT_LOADED;
    if (stat(path, &sb) != 0) return DRIVER_NOT_LOADED;
    pthread_mutex_lock(&gpus_lock);
    if (gpus_cached && same_file(&sb, &gpus_key)) {
        st->n = gpus_cache.n;
        memcpy(st->gpu, gpus_cache.gpu, gpus_cache.n * sizeof st->gpu[0]);
        pthread_mutex_unlock(&gpus_lock);
        return OK;
    }
    pthread_mutex_unlock(&gpus_lock);
    FILE *f = fopen(path, "r");
    if (f == NULL) return DRIVER_NOT_LOADED;
    struct stat opened;
    int keep = fstat(fileno(f), &opened) == 0 && stable(&opened);
    int code = parse_gpus(st, f);
    if (code == OK && keep) {
        pthread_mutex_lock(&gpus_lock);
        gpus_cache.n = st->n;
        memcpy(gpus_cache.gpu, st->gpu, st->n * sizeof st->gpu[0]);
        gpus_key = opened;
        gpus_cached = 1;
        pthread_mutex_unlock(&gpus_lock);
    }
    return code;
}

static int parse_gpus(struct state *st, FILE *f) {
    char line[LINE_LEN];
    st->n = 0;
    while (st->n < MAX_GPUS && read_line(f, line, sizeof line)) {
        u64 v;
        if (!starts_key(line)) continue; /* blank or comment */
        struct gpu *g = &st->gpu[st->n];
        memset(g, 0, sizeof *g);
        g->index = field_u64(line, "index", &v) == 0 && v < MAX_GPUS ? (unsigned)v : st->n;
        if (field(line, "uuid", g->uuid, sizeof g->uuid) != 0)
            snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%u", g->index);
        if (field(line, "name", g->name, sizeof g->name) != 0)
            snprintf(g->name, sizeof g->name, "Fake GPU");
        g->total_mib = field_u64(line, "total_mib", &v) == 0 ? v : 81920;
        g->base_mib = field_u64(line, "base_mib", &v) == 0 ? v : 0;
        g->reserved_mib = field_u64(line, "reserved_mib", &v) == 0 ? v : 0;
        g->util = field_u64(line, "util", &v) == 0 && v <= 100 ? (unsigned)v : 0;
        g->mem_util = field_u64(line, "mem_util", &v) == 0 && v <= 100 ? (unsigned)v : 0;
        g->recovery = field_u64(line, "recovery", &v) == 0 ? v : 0;
        g->remap_pending = field_u64(line, "remap_pending", &v) == 0 ? v : 0;
        g->remap_failed = field_u64(line, "remap_failed", &v) == 0 ? v : 0;
        g->dbe = field_u64(line, "dbe", &v) == 0 ? v : 0;
        g->clocks_event_reasons = field_mask(line, "clocks_event_reasons", &v) == 0 ? v : 0;
        st->n++;
    }
    fclose(f);
    return OK;
}

static struct gpu *find_gpu(struct state *st, unsigned index) {
    for (unsigned i = 0; i < st->n; i++)
        if (st->gpu[i].index == index) return &st->gpu[i];
    return NULL;
}

/* A holder counts while it is alive and not a zombie, so its memory frees itself when the job
 * dies, as on a real driver. */
static int pid_alive(unsigned pid) {
    char path[64], buf[LINE_LEN];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the command name may itself contain ')' */
    return paren != NULL && paren[1] == ' ' && paren[2] != '\0' && paren[2] != 'Z';
}

static void add_holder(struct gpu *g, unsigned pid, u64 mib) {
    g->procs_mib += mib;
    for (unsigned i = 0; i < g->nprocs; i++)
        if (g->pids[i] == pid) { g->pid_mib[i] += mib; return; }
    if (g->nprocs < MAX_PROCS) {
        g->pids[g->nprocs] = pid;
        g->pid_mib[g->nprocs++] = mib;
    }
}

static void load_procs(struct state *st) {
    char dirpath[PATH_LEN], path[PATH_LEN + 300], line[LINE_LEN];
    if (state_path(dirpath, sizeof dirpath, "procs") != 0) return;
    DIR *d = opendir(dirpath);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        size_t len = strspn(s, "0123456789");
        if (len == 0 || len > 9 || s[len] != '\0') continue;
        unsigned pid = (unsigned)strtoul(s, NULL, 10);
        if (!pid_alive(pid)) continue;
        snprintf(path, sizeof path, "%s/%s", dirpath, s);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue; /* deleted between readdir and open: released */
        while (read_line(f, line, sizeof line)) {
            u64 gpu, mib;
            struct gpu *g;
            if (field_u64(line, "gpu", &gpu) == 0 && field_u64(line, "mib", &mib) == 0 &&
                gpu < MAX_GPUS && (g = find_gpu(st, (unsigned)gpu)) != NULL)
                add_holder(g, pid, mib);
        }
        fclose(f);
    }
    closedir(d);
}

/* ---- injected faults ---------------------------------------------------------------------- */

static int parse_code(const char *s) {
    if (isdigit((unsigned char)s[0])) return (int)strtol(s, NULL, 10);
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (strcmp(s, ERRORS[i].name) == 0) return ERRORS[i].code;
    return UNKNOWN;
}

/* Scan the faults file once: the longest delay and the first error code that match. A line
 * without gpu= (or gpu=*) matches every call; gpu=<n> only calls about that device. */
static void scan_faults(const char *func, int gpu, u64 *delay_ms, int *code) {
    char path[PATH_LEN], line[LINE_LEN], val[64];
    *delay_ms = 0;
    *code = OK;
    if (state_path(path, sizeof path, "faults") != 0) return;
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    while (read_line(f, line, sizeof line)) {
        if (!starts_key(line)) continue;
        if (field(line, "func", val, sizeof val) == 0 && strcmp(val, "*") != 0 &&
            strcmp(val, func) != 0)
            continue;
        if (field(line, "gpu", val, sizeof val) == 0 && strcmp(val, "*") != 0 &&
            (gpu < 0 || strtol(val, NULL, 10) != gpu || !isdigit((unsigned char)val[0])))
            continue;
        u64 d;
        if (field_u64(line, "delay_ms", &d) == 0 && d > *delay_ms) *delay_ms = d;
        if (*code == OK && field(line, "code", val, sizeof val) == 0) *code = parse_code(val);
    }
    fclose(f);
}

static u64 now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000 + (u64)ts.tv_nsec / 1000000;
}

/* A delay is a plain sleep inside the call, which is how a wedged driver looks to the caller.
 * It ends early once the faults file no longer asks for it. */
static int faults(const char *func, int gpu) {
    u64 delay, start = now_ms();
    int code;
    scan_faults(func, gpu, &delay, &code);
    while (delay > 0 && now_ms() - start < delay) {
        struct timespec slice = {0, SLICE_MS * 1000000L};
        nanosleep(&slice, NULL);
        scan_faults(func, gpu, &delay, &code);
    }
    return code;
}

/* ---- common entry for device calls -------------------------------------------------------- */

/* Check init, the handle and faults, then load the state. On OK the caller owns *st. */
static nvmlReturn_t enter(const char *func, nvmlDevice_t dev, int with_procs, struct state **st,
                          struct gpu **g) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (dev < handles || dev >= handles + MAX_GPUS) return INVALID_ARGUMENT;
    unsigned index = (unsigned)(dev - handles);
    int code = faults(func, (int)index);
    if (code != OK) return code;
    *st = calloc(1, sizeof **st);
    if (*st == NULL) return UNKNOWN;
    code = load_gpus(*st);
    /* A GPU that left the gpus file has "fallen off the bus". */
    if (code == OK && (*g = find_gpu(*st, index)) == NULL) code = GPU_IS_LOST;
    if (code != OK) { free(*st); *st = NULL; return code; }
    if (with_procs) load_procs(*st);
    return OK;
}

static nvmlReturn_t copy_str(char *out, unsigned len, const char *s) {
    if (out == NULL) return INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return OK;
}

/* ---- exported NVML API -------------------------------------------------------------------- */

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == result) return ERRORS[i].name;
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    int code = faults("nvmlInitWithFlags", -1);
    if (code != OK) return code;
    struct state *st = calloc(1, sizeof *st);
    if (st == NULL) return UNKNOWN;
    code = load_gpus(st);
    free(st);
    if (code == OK) __atomic_add_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return code;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    int code = faults("nvmlShutdown", -1);
    if (code != OK) return code;
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    __atomic_sub_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return OK;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    int code = faults("nvmlSystemGetDriverVersion", -1);
#ifdef FAKE_NVML_OLD
    return code != OK ? code : copy_str(version, length, "470.256.02");
#else
    return code != OK ? code : copy_str(version, length, "550.127.08");
#endif
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (count == NULL) return INVALID_ARGUMENT;
    int code = faults("nvmlDeviceGetCount_v2", -1);
    struct state *st = code == OK ? calloc(1, sizeof *st) : NULL;
    if (code != OK || st == NULL) return code != OK ? code : UNKNOWN;
    code = load_gpus(st);
    if (code == OK) *count = st->n;
    free(st);
    return code;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (device == NULL) return INVALID_ARGUMENT;
    int code = faults("nvmlDeviceGetHandleByIndex_v2", (int)index);
    struct state *st = code == OK ? calloc(1, sizeof *st) : NULL;
    if (code != OK || st == NULL) return code != OK ? code : UNKNOWN;
    code = load_gpus(st);
    /* An index beyond the devices is INVALID_ARGUMENT, as NVML answers it. */
    if (code == OK && (index >= MAX_GPUS || find_gpu(st, index) == NULL)) code = INVALID_ARGUMENT;
    free(st);
    if (code == OK) *device = &handles[index];
    return code;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (uuid == NULL || device == NULL) return INVALID_ARGUMENT;
    struct state *st = calloc(1, sizeof *st);
    if (st == NULL) return UNKNOWN;
    int code = load_gpus(st), index = -1;
    for (unsigned i = 0; code == OK && i < st->n; i++)
        if (strncmp(st->gpu[i].uuid, uuid, STR_LEN) == 0) index = (int)st->gpu[i].index;
    free(st);
    if (code == OK) code = faults("nvmlDeviceGetHandleByUUID", index);
    if (code == OK && index < 0) code = NOT_FOUND;
    if (code == OK) *device = &handles[index];
    return code;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    struct state *st;
    struct gpu *g;
    if (index == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetIndex", device, 0, &st, &g);
    if (code != OK) return code;
    *index = g->index;
    free(st);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct state *st;
    struct gpu *g;
    int code = enter("nvmlDeviceGetUUID", device, 0, &st, &g);
    if (code != OK) return code;
    code = copy_str(uuid, length, g->uuid);
    free(st);
    return code;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct state *st;
    struct gpu *g;
    int code = enter("nvmlDeviceGetName", device, 0, &st, &g);
    if (code != OK) return code;
    code = copy_str(name, length, g->name);
    free(st);
    return code;
}

/* v1 `used` includes the driver-reserved memory; v2 reports it apart. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct state *st;
    struct gpu *g;
    if (memory == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetMemoryInfo", device, 1, &st, &g);
    if (code != OK) return code;
    u64 used = g->base_mib + g->reserved_mib + g->procs_mib;
    memory->total = g->total_mib * MIB;
    memory->used = used * MIB;
    memory->free = used < g->total_mib ? (g->total_mib - used) * MIB : 0;
    free(st);
    return OK;
}

#ifndef FAKE_NVML_OLD
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    struct state *st;
    struct gpu *g;
    if (memory == NULL) return INVALID_ARGUMENT;
    if (memory->version != MEMORY_V2_VERSION) return ARGUMENT_VERSION_MISMATCH;
    int code = enter("nvmlDeviceGetMemoryInfo_v2", device, 1, &st, &g);
    if (code != OK) return code;
    u64 used = g->base_mib + g->procs_mib, taken = used + g->reserved_mib;
    memory->total = g->total_mib * MIB;
    memory->reserved = g->reserved_mib * MIB;
    memory->used = used * MIB;
    memory->free = taken < g->total_mib ? (g->total_mib - taken) * MIB : 0;
    free(st);
    return OK;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    struct state *st;
    struct gpu *g;
    if (util == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetUtilizationRates", device, 0, &st, &g);
    if (code != OK) return code;
    util->gpu = g->util;
    util->memory = g->mem_util;
    free(st);
    return OK;
}

/* Clock event reasons: the bit mask of the gpus file's `clocks_event_reasons`. Drivers before
 * R535 only have the older name, ...ThrottleReasons (same bits), which both builds export. */
static nvmlReturn_t clock_reasons(const char *func, nvmlDevice_t device, u64 *reasons) {
    struct state *st;
    struct gpu *g;
    if (reasons == NULL) return INVALID_ARGUMENT;
    int code = enter(func, device, 0, &st, &g);
    if (code != OK) return code;
    *reasons = g->clocks_event_reasons;
    free(st);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, u64 *reasons) {
    return clock_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

#ifndef FAKE_NVML_OLD
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, u64 *reasons) {
    return clock_reasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}

/* The size-query protocol: too small a *count gets INSUFFICIENT_SIZE and the needed count. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    struct state *st;
    struct gpu *g;
    if (count == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetComputeRunningProcesses_v3", device, 1, &st, &g);
    if (code != OK) return code;
    if (g->nprocs > *count || (g->nprocs > 0 && infos == NULL)) {
        code = INSUFFICIENT_SIZE;
    } else {
        for (unsigned i = 0; i < g->nprocs; i++) {
            infos[i].pid = g->pids[i];
            infos[i].usedGpuMemory = g->pid_mib[i] * MIB;
            infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
            infos[i].computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = g->nprocs;
    free(st);
    return code;
}
#endif

/* ---- fault counters and Xid events (absent from the old build, as on an old driver) -------- */

#ifndef FAKE_NVML_OLD
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    union { double d; unsigned int ui; unsigned long ul; u64 ull; } value;
} nvmlFieldValue_t;
#define FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define NOT_SUPPORTED 3
#define TIMEOUT 10

/* Only the recovery action is simulated; any other field answers NOT_SUPPORTED in its slot. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                             nvmlFieldValue_t *values) {
    struct state *st;
    struct gpu *g;
    if (values == NULL || count < 0) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetFieldValues", device, 0, &st, &g);
    if (code != OK) return code;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)now_ms() * 1000;
        v->latencyUsec = 0;
        if (v->fieldId == FI_DEV_GET_GPU_RECOVERY_ACTION) {
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->nvmlReturn = OK;
            v->value.ull = 0;
            v->value.ui = (unsigned)g->recovery;
        } else {
            v->nvmlReturn = NOT_SUPPORTED;
        }
    }
    free(st);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr,
                                              unsigned int *unc, unsigned int *pending,
                                              unsigned int *failure) {
    struct state *st;
    struct gpu *g;
    if (corr == NULL || unc == NULL || pending == NULL || failure == NULL)
        return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetRemappedRows", device, 0, &st, &g);
    if (code != OK) return code;
    *corr = 0;
    *unc = (unsigned)(g->remap_pending + g->remap_failed);
    *pending = g->remap_pending ? 1 : 0;
    *failure = g->remap_failed ? 1 : 0;
    free(st);
    return OK;
}

/* errorType 1 = uncorrected (double bit), counterType 0 = volatile: the `dbe` count. */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType,
                                                int counterType, u64 *count) {
    struct state *st;
    struct gpu *g;
    if (count == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetTotalEccErrors", device, 0, &st, &g);
    if (code != OK) return code;
    *count = errorType == 1 && counterType == 0 ? g->dbe : 0;
    free(st);
    return OK;
}

typedef struct {
    nvmlDevice_t device;
    u64 eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct event_set {
    u64 mask[MAX_GPUS]; /* registered event types per device */
    long offset;        /* bytes of the events file already delivered or skipped */
};
typedef struct event_set *nvmlEventSet_t;

/* The end of the last complete line of the events file: a line still being appended (no
 * newline yet) is read on a later call, whole. */
static long complete_lines_end(FILE *f, long from) {
    char line[LINE_LEN];
    long end = from;
    if (fseek(f, from, SEEK_SET) != 0) return from;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strchr(line, '\n') == NULL && feof(f)) break;
        if (strchr(line, '\n') != NULL) end = ftell(f);
    }
    return end;
}

static long events_end(void) {
    char path[PATH_LEN];
    if (state_path(path, sizeof path, "events") != 0) return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    long end = complete_lines_end(f, 0);
    fclose(f);
    return end;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (set == NULL) return INVALID_ARGUMENT;
    int code = faults("nvmlEventSetCreate", -1);
    if (code != OK) return code;
    *set = calloc(1, sizeof **set);
    if (*set == NULL) return UNKNOWN;
    (*set)->offset = events_end(); /* events before registration are lost */
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, u64 *types) {
    struct state *st;
    struct gpu *g;
    if (types == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceGetSupportedEventTypes", device, 0, &st, &g);
    if (code != OK) return code;
    *types = 0xFFFFull;
    free(st);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, u64 types, nvmlEventSet_t set) {
    struct state *st;
    struct gpu *g;
    if (set == NULL) return INVALID_ARGUMENT;
    int code = enter("nvmlDeviceRegisterEvents", device, 0, &st, &g);
    if (code != OK) return code;
    set->mask[device - handles] |= types;
    free(st);
    return OK;
}

/* The next undelivered line for a registered device and type, or 0. Reading resumes where the
 * last call stopped (a storm of 1,500 events costs one pass over the file, not 1,500), and only
 * whole lines are taken: a line half-written by a concurrent append waits for the next call. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    char path[PATH_LEN], line[LINE_LEN];
    struct stat sb;
    if (state_path(path, sizeof path, "events") != 0) return 0;
    /* Nothing past where this set stopped: no line to read (a stat, not an open and a read,
     * so the wait's polling costs what a driver's blocking wait would, about nothing). */
    if (stat(path, &sb) != 0 || sb.st_size <= set->offset) return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int found = 0;
    if (fseek(f, set->offset, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    while (!found && fgets(line, sizeof line, f) != NULL) {
        if (strchr(line, '\n') == NULL) {
            if (feof(f)) break; /* not whole yet */
            int c; /* longer than LINE_LEN: skipped */
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            if (c == EOF) break;
            set->offset = ftell(f);
            continue;
        }
        set->offset = ftell(f);
        u64 gpu, type = 8, xid = 0;
        if (!starts_key(line) || field_u64(line, "gpu", &gpu) != 0 || gpu >= MAX_GPUS) continue;
        field_u64(line, "type", &type);
        field_u64(line, "data", &xid);
        if ((set->mask[gpu] & type) == 0) continue;
        data->device = &handles[gpu];
        data->eventType = type;
        data->eventData = xid;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        found = 1;
    }
    fclose(f);
    return found;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0) return UNINITIALIZED;
    if (set == NULL || data == NULL) return INVALID_ARGUMENT;
    int code = faults("nvmlEventSetWait_v2", -1);
    if (code != OK) return code;
    const char *poll = getenv("FAKE_NVML_EVENT_POLL_MS"); /* the bench's knob; see README */
    u64 slice_ms = poll != NULL && atoi(poll) > 0 ? (u64)atoi(poll) : EVENT_SLICE_MS;
    u64 start = now_ms();
    for (;;) {
        if (next_event(set, data)) return OK;
        u64 waited = now_ms() - start;
        if (waited >= timeout_ms) return TIMEOUT;
        u64 left = timeout_ms - waited, step = left < slice_ms ? left : slice_ms;
        struct timespec slice = {(time_t)(step / 1000), (long)(step % 1000) * 1000000L};
        nanosleep(&slice, NULL);
    }
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (set == NULL) return INVALID_ARGUMENT;
    free(set);
    return OK;
}
#endif
