/*
 * mpi_loader.c - the MPI communicator on demand: finds libctrain_mpi (dist_internal.h), loads it
 * with dlopen when a program asks for the MPI communicator or its library's version, and makes
 * a communicator over what it exports; and the test of whether a launcher started this process
 * as one rank of several. Nothing here runs for a program that asks for neither, so such a
 * program needs no MPI library at all.
 *
 * Where libctrain_mpi is looked for, in order:
 *   1. CTRAIN_MPI_LIBRARY, when set and not empty: that file and nothing else;
 *   2. the folder of the file that holds libctrain's code: libctrain.so's own, or the program's
 *      for a program linked with libctrain.a (the ctrain tool), and for a program also that
 *      folder's CT_MPI_BIN_TO_LIB (../lib for one installed in <prefix>/bin): a build tree and
 *      an installed tree keep it there, wherever they are;
 *   3. its soname, through the dynamic loader's own search (LD_LIBRARY_PATH, the program's
 *      RUNPATH, ld.so.cache).
 * The first file found in 2 is the one: when it does not load (its MPI library is missing,
 * usually), the error says why rather than trying a file from another build.
 *
 * The library stays loaded for the rest of the process (RTLD_NODELETE): MPI cannot be
 * initialised twice in a process, and it leaves threads and handlers behind.
 */
#define _GNU_SOURCE /* dladdr, dl_iterate_phdr */

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist_internal.h"

/* Whether the environment names a world of more than one process: Open MPI's mpirun,
 * MPICH's Hydra (and other PMI launchers), Slurm's srun, or CTRAIN_MPI=1 to insist. */
bool ct_comm_launched(void) {
    const char *force = getenv("CTRAIN_MPI");
    if (force && strcmp(force, "1") == 0) return true;
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
                                        NULL};
    for (int i = 0; sizes[i]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && atol(v) > 1) return true;
    }
    return false;
}

#ifndef CT_HAVE_MPI

bool ct_comm_mpi_available(void) {
    return false;
}

void ct_comm_mpi_library(char *buf, size_t size) {
    if (size) (void)snprintf(buf, size, "none (built without MPI)");
}

ct_status ct_comm_create_mpi(ct_ctx *ctx, ct_comm **out) {
    *out = NULL;
    return CT_FAIL(ctx, CT_ERR_DIST,
                   "this ctrain was built without MPI: install libopenmpi-dev (or libmpich-dev) "
                   "and build again (docs/distributed.md)");
}

#else

enum { PATH_SIZE = 4096 };

bool ct_comm_mpi_available(void) {
    return true;
}

/* The file that holds this code, found by address: dladdr would name argv[0] for a program. */
typedef struct home {
    uintptr_t addr;
    bool program; /* the program itself, not a shared library */
    char path[PATH_SIZE];
} home;

static int holds(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    home *h = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (uintptr_t)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type != PT_LOAD || h->addr < lo || h->addr - lo >= ph->p_memsz) continue;
        h->program = !info->dlpi_name || !info->dlpi_name[0];
        if (!h->program) (void)snprintf(h->path, sizeof h->path, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

static const char k_anchor = 0; /* an address inside libctrain's code */

/* The folder of the file that holds libctrain into dir (empty when unknown); whether that file
 * is the program. */
static bool home_dir(char *dir, size_t size) {
    home h = {.addr = (uintptr_t)&k_anchor};
    (void)dl_iterate_phdr(holds, &h);
    if (h.program) {
        ssize_t n = readlink("/proc/self/exe", h.path, sizeof h.path - 1);
        h.path[n > 0 ? n : 0] = '\0';
    }
    /* a relative name (a relative LD_LIBRARY_PATH) means another folder once the program
       changes directory: unknown, and the soname's search decides */
    char *slash = h.path[0] == '/' ? strrchr(h.path, '/') : NULL;
    if (slash) *slash = '\0';
    (void)snprintf(dir, size, "%s", slash ? h.path : "");
    return h.program;
}

/* dlopen's handle on path, or NULL with dlerror's text in why. */
static void *open_library(const char *path, char *why, size_t size) {
    /* GLOBAL: MPI's own plugins (Open MPI's components, which libmpi loads with dlopen) expect
       its symbols where a program linked with -lmpi has them. libctrain_mpi exports one. */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        (void)snprintf(why, size, "%s", e ? e : "dlopen failed");
    }
    return h;
}

/* libctrain_mpi's exports and the file they came from (into from), or NULL with why (a
 * phrase) in why. */
static const ct_mpi_module *load(char *why, size_t why_size, char *from, size_t from_size) {
    char path[PATH_SIZE + 64], err[1024] = "";
    void *h = NULL;
    /* not in a program run with raised privileges (setuid), where the environment is not
       the user's to trust */
    const char *env = secure_getenv("CTRAIN_MPI_LIBRARY");
    if (env && env[0]) {
        h = open_library(env, err, sizeof err);
        if (!h) {
            (void)snprintf(why, why_size, "CTRAIN_MPI_LIBRARY=%s: %s", env, err);
            return NULL;
        }
    } else {
        char dir[PATH_SIZE], tried[2 * sizeof path] = "";
        bool program = home_dir(dir, sizeof dir);
        const char *const subs[] = {"", program ? "/" CT_MPI_BIN_TO_LIB : NULL};
        for (size_t i = 0; !h && dir[0] && i < 2 && subs[i]; i++) {
            (void)snprintf(path, sizeof path, "%s%s/%s", dir, subs[i], CT_MPI_SONAME);
            if (access(path, F_OK) != 0) {
                size_t at = strlen(tried);
                (void)snprintf(tried + at, sizeof tried - at, "%s%s", at ? " or " : "", path);
                continue;
            }
            h = open_library(path, err, sizeof err);
            if (!h) { /* dlerror names the file when it is that one, not when a library it needs */
                bool named = strncmp(err, path, strlen(path)) == 0;
                (void)snprintf(why, why_size, "%s%s%s", named ? "" : path, named ? "" : ": ", err);
                return NULL;
            }
        }
        if (!h) h = open_library(CT_MPI_SONAME, err, sizeof err);
        if (!h) {
            (void)snprintf(why, why_size, "%s is not at %s, and the dynamic loader says: %s",
                           CT_MPI_SONAME, tried[0] ? tried : "(libctrain's folder is unknown)",
                           err);
            return NULL;
        }
    }
    const ct_mpi_module *m = dlsym(h, CT_MPI_ENTRY);
    Dl_info info;
    const char *file = env && env[0] ? env : CT_MPI_SONAME;
    struct link_map *lm = NULL; /* the file the handle is, for a module without the symbol */
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        file = lm->l_name;
    if (m && dladdr(m, &info) && info.dli_fname && info.dli_fname[0]) file = info.dli_fname;
    if (!m) {
        (void)snprintf(why, why_size, "%s exports no %s: it is not a libctrain_mpi", file,
                       CT_MPI_ENTRY);
        m = NULL;
    } else if (m->abi != CT_MPI_ABI || strcmp(m->version, CT_VERSION_STRING) != 0) {
        (void)snprintf(why, why_size,
                       "%s is the libctrain_mpi of ctrain %s (interface %d), this libctrain is "
                       "%s (interface %d)",
                       file, m->abi == CT_MPI_ABI ? m->version : "?", m->abi, CT_VERSION_STRING,
                       CT_MPI_ABI);
        m = NULL;
    }
    if (m && from_size) (void)snprintf(from, from_size, "%s", file);
    /* the library stays (RTLD_NODELETE), and with it m */
    (void)dlclose(h);
    return m;
}

void ct_comm_mpi_library(char *buf, size_t size) {
    char why[2 * PATH_SIZE], from[PATH_SIZE], text[512];
    const ct_mpi_module *m = load(why, sizeof why, from, sizeof from);
    if (!m) {
        if (size) (void)snprintf(buf, size, "not available (%s)", why);
        return;
    }
    m->library(text, sizeof text);
    if (size) (void)snprintf(buf, size, "%s (loaded on demand from %s)", text, from);
}

static const ct_mpi_host k_host = {ct_fail_at, ct_log};

ct_status ct_comm_create_mpi(ct_ctx *ctx, ct_comm **out) {
    *out = NULL;
    char why[2 * PATH_SIZE];
    const ct_mpi_module *m = load(why, sizeof why, NULL, 0);
    if (!m)
        return CT_FAIL(ctx, CT_ERR_DIST,
                       "cannot load the MPI communicator: %s. Install the MPI library this "
                       "ctrain was built with (Debian: libopenmpi3, or libmpich12 for a build "
                       "with MPICH), keep %s beside libctrain, or name it in CTRAIN_MPI_LIBRARY "
                       "(docs/distributed.md)",
                       why, CT_MPI_SONAME);
    void *self = NULL;
    CT_TRY(m->create(&k_host, ctx, &self));
    return ct_comm_create_with(ctx, m->vt, self, out);
}

#endif /* CT_HAVE_MPI */
