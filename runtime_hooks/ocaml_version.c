/*
 * runtime_hooks/ocaml_version.c — recognises the OCaml runtime release and
 * checks the agent's facts about it (see ocaml_version.h). Runs once, in
 * the agent's constructor.
 */
#include "runtime_hooks/ocaml_version.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime_hooks/ocaml_layout.h"
#include "runtime_hooks/ocaml_rt.h"

#define MAX_MARKERS 4

/* A release the agent knows. Markers were checked with `nm -D` on programs
 * built by each release (make deps builds 5.1.0, 5.3.0, 5.4.1 and 5.5.2); the offsets are
 * from that release's runtime/caml/domain_state.tbl and fiber.h. */
struct release {
    const char *name;
    const char *has[MAX_MARKERS];   /* runtime functions this release defines */
    const char *lacks[MAX_MARKERS]; /* ones it does not (added or removed later) */
    int ds_current_stack, ds_c_stack, ds_id, ds_local_roots;
    int si_sp, si_handler, si_size, sh_parent, csl_sp;
    /* The heap-fill sampler's counters (runtime_hooks/gc_hooks.c):
     * unique_id, stat_promoted_words, stat_major_words; 0: not read on
     * this release (--alloc is then CPU only). */
    int ds_unique_id, ds_stat_promoted, ds_stat_major;
};

static const struct release releases[] = {
    {"5.1",
     {"caml_ml_domain_unique_token", "caml_do_pending_actions_exn"},
     {"caml_ml_domain_index", "caml_callback_res"},
     40, 64, 280, 152, 0, 16, 56, 24, 8, 0, 0, 0},
    {"5.3",
     {"caml_ml_domain_index", "caml_callback_res", "caml_update_young_limit_after_c_call"},
     {"caml_ml_domain_unique_token", "caml_do_pending_actions_exn", "caml_c_call_copy_stack_args"},
     40, 64, 288, 160, 0, 16, 56, 24, 8, 296, 392, 400},
    /* 5.4 adds four fields after allocated_words (ramp-up accounting and
     * the GC policy): id and local_roots move 32 bytes; caml_c_call_stack_args
     * copies its arguments in a new function of its own. */
    {"5.4",
     {"caml_ml_domain_index", "caml_callback_res", "caml_c_call_copy_stack_args"},
     {"caml_ml_domain_unique_token", "caml_do_pending_actions_exn", "caml_live_stacks_memory"},
     40, 64, 320, 192, 0, 16, 56, 24, 8, 328, 424, 432},
    /* 5.5 splits major_work_done_between_slices in two (sweep and mark
     * work): the statistics after it move 8 bytes; id, local_roots, the
     * stack structures and runtime/amd64.S are 5.4's. Gc.stat's restored
     * stack sizes bring caml_live_stacks_memory. */
    {"5.5",
     {"caml_ml_domain_index", "caml_callback_res", "caml_c_call_copy_stack_args",
      "caml_live_stacks_memory"},
     {"caml_ml_domain_unique_token", "caml_do_pending_actions_exn"},
     40, 64, 320, 192, 0, 16, 56, 24, 8, 328, 432, 440},
};

int flamme_ocaml_ds_id = 288; /* 5.3's, until the check sets it */
int flamme_ocaml_ds_local_roots = 160;
int flamme_ocaml_ds_unique_id, flamme_ocaml_ds_stat_promoted, flamme_ocaml_ds_stat_major;

/* Symbols the agent reads as data: pointer-sized objects (the GC timing
 * hooks are `_Atomic caml_timing_hook`, a void (*)(void)). */
static const char *const hook_vars[] = {"caml_minor_gc_begin_hook", "caml_minor_gc_end_hook",
                                        "caml_major_slice_begin_hook",
                                        "caml_major_slice_end_hook"};

/* The dynamic symbols of one loaded object, for lookups by name through
 * its GNU hash table. dladdr1 scans every dynamic symbol of the object at
 * each call, and an OCaml executable exports all of its symbols: seven
 * lookups took ~2.8 ms of the agent's start on ocamlopt.opt. */
struct dynsyms {
    uintptr_t lo, hi, base; /* the object's loaded range and load bias */
    const ElfW(Sym) *sym;
    const char *str;
    const uint32_t *gnu;
};

struct find_obj {
    uintptr_t addr;
    struct dynsyms *d;
    int found;
};

/* A pointer from the object's dynamic section: relocated by the loader
 * (glibc adjusts writable dynamic sections) or not yet. */
static uintptr_t dyn_ptr(uintptr_t v, uintptr_t base)
{
    return v < base ? v + base : v;
}

/* dl_iterate_phdr callback: the object whose loaded segments hold addr. */
static int find_obj_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_obj *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    const ElfW(Dyn) *dyn = NULL;
    int holds = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)a;
        if (ph->p_type != PT_LOAD)
            continue;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
        holds |= f->addr >= a && f->addr < a + ph->p_memsz;
    }
    if (!holds || !dyn)
        return 0;
    struct dynsyms d = {lo, hi, info->dlpi_addr, NULL, NULL, NULL};
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB)
            d.sym = (const ElfW(Sym) *)dyn_ptr(dyn->d_un.d_ptr, d.base);
        else if (dyn->d_tag == DT_STRTAB)
            d.str = (const char *)dyn_ptr(dyn->d_un.d_ptr, d.base);
        else if (dyn->d_tag == DT_GNU_HASH)
            d.gnu = (const uint32_t *)dyn_ptr(dyn->d_un.d_ptr, d.base);
    }
    *f->d = d;
    f->found = d.sym && d.str && d.gnu;
    return 1;
}

/* The dynamic symbol name of d by its GNU hash table, or NULL. */
static const ElfW(Sym) *gnu_lookup(const struct dynsyms *d, const char *name)
{
    uint32_t h = 5381;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = h * 33 + *c;
    uint32_t nbuckets = d->gnu[0], symoffset = d->gnu[1], bloom_words = d->gnu[2];
    if (!nbuckets)
        return NULL;
    const uint32_t *buckets = d->gnu + 4 + bloom_words * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset)
        return NULL;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        if ((ch | 1) == (h | 1) && strcmp(name, d->str + d->sym[i].st_name) == 0)
            return &d->sym[i];
        if (ch & 1)
            return NULL;
    }
}

const ElfW(Sym) *flamme_ocaml_dynsym(const char *name, void **addr)
{
    static struct dynsyms obj; /* the last object found (agent constructor only) */
    *addr = dlsym(RTLD_DEFAULT, name);
    if (!*addr)
        return NULL;
    uintptr_t a = (uintptr_t)*addr;
    if (!(obj.gnu && a >= obj.lo && a < obj.hi)) {
        struct find_obj f = {a, &obj, 0};
        dl_iterate_phdr(find_obj_cb, &f);
        if (!f.found)
            obj.gnu = NULL;
    }
    if (obj.gnu) {
        const ElfW(Sym) *sym = gnu_lookup(&obj, name);
        if (sym && sym->st_shndx != SHN_UNDEF && obj.base + sym->st_value == a)
            return sym;
    }
    /* No GNU hash table, or it does not name this definition. */
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(*addr, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
        return NULL;
    return sym;
}

/* The code of function fn: its address, and in *len its size capped at
 * `within` bytes. NULL if fn is not a function. */
static const unsigned char *code(const char *fn, size_t within, size_t *len)
{
    void *addr;
    const ElfW(Sym) *sym = flamme_ocaml_dynsym(fn, &addr);
    if (!sym || ELF64_ST_TYPE(sym->st_info) != STT_FUNC)
        return NULL;
    *len = sym->st_size && sym->st_size < within ? sym->st_size : within;
    return addr;
}

/* 1 if the first `within` bytes of function fn contain pat[0..n). */
static int code_has(const char *fn, const unsigned char *pat, size_t n, size_t within)
{
    size_t len;
    const unsigned char *c = code(fn, within, &len);
    return c && len >= n && memmem(c, len, pat, n) != NULL;
}

/* The displacement of the first movslq disp32(%rdi),reg (an int field read
 * through the first argument, sign-extended as an array index is) in the
 * first `within` bytes of function fn, or -1 if there is none. */
static long first_index_load_rdi(const char *fn, size_t within)
{
    size_t len;
    const unsigned char *c = code(fn, within, &len);
    for (size_t i = 0; c && i + 7 <= len; i++) {
        /* REX.W (+R): 0x48/0x4c; 0x63 movslq; ModRM mod 10 (disp32), rm 111 (%rdi). */
        if ((c[i] == 0x48 || c[i] == 0x4c) && c[i + 1] == 0x63 && (c[i + 2] & 0xc7) == 0x87) {
            int32_t disp;
            memcpy(&disp, c + i + 3, sizeof disp);
            return disp;
        }
    }
    return -1;
}

static const struct release *identify(void)
{
    for (size_t i = 0; i < sizeof releases / sizeof releases[0]; i++) {
        const struct release *r = &releases[i];
        int ok = 1;
        for (int k = 0; ok && k < MAX_MARKERS && r->has[k]; k++)
            ok = dlsym(RTLD_DEFAULT, r->has[k]) != NULL;
        for (int k = 0; ok && k < MAX_MARKERS && r->lacks[k]; k++)
            ok = dlsym(RTLD_DEFAULT, r->lacks[k]) == NULL;
        if (ok)
            return r;
    }
    return NULL;
}

const char *flamme_ocaml_check_runtime(char *why, size_t whylen)
{
    const struct release *r = identify();
    if (!r) {
        snprintf(why, whylen, "this program's OCaml runtime is not a release flamme knows "
                              "(5.1, 5.3, 5.4 or 5.5: its runtime functions differ)");
        return NULL;
    }
    /* The agent reads current_stack, c_stack, stack_info and stack_handler
     * at compile-time offsets; only the domain id's offset follows r. */
    if (r->ds_current_stack != DS_CURRENT_STACK || r->ds_c_stack != DS_C_STACK ||
        r->si_sp != SI_SP || r->si_handler != SI_HANDLER || r->si_size != SI_SIZE ||
        r->sh_parent != SH_PARENT || r->csl_sp != CSL_SP) {
        snprintf(why, whylen, "OCaml %s's stack structures differ from the ones this flamme reads",
                 r->name);
        return NULL;
    }
    /* caml_state: a pointer in some module's thread-local block (the
     * handler reads each thread's own through that module and offset). */
    if (!flamme_ocaml_state_slot()) {
        snprintf(why, whylen,
                 "OCaml %s runtime: caml_state is not the thread-local pointer expected", r->name);
        return NULL;
    }
    for (size_t i = 0; i < sizeof hook_vars / sizeof hook_vars[0]; i++) {
        void *addr;
        const ElfW(Sym) *sym = flamme_ocaml_dynsym(hook_vars[i], &addr);
        if (!sym || ELF64_ST_TYPE(sym->st_info) != STT_OBJECT || sym->st_size != sizeof(void *)) {
            snprintf(why, whylen, "OCaml %s runtime: %s is not the pointer-sized hook expected",
                     r->name, hook_vars[i]);
            return NULL;
        }
    }
    /* caml_c_call's switch to the C stack (SWITCH_OCAML_TO_C in
     * runtime/amd64.S): mov current_stack(%r14),%r10; mov %rsp,sp(%r10);
     * mov c_stack(%r14),%r11; mov %rsp,sp(%r11) — with our offsets. */
    _Static_assert(SI_SP == 0 && DS_C_STACK < 128 && DS_CURRENT_STACK < 128 && CSL_SP < 128,
                   "the encodings below use disp0/disp8 forms");
    const unsigned char c_call[] = {0x4d, 0x8b, 0x56, DS_CURRENT_STACK, 0x49, 0x89, 0x22,
                                    0x4d, 0x8b, 0x5e, DS_C_STACK,       0x49, 0x89, 0x63, CSL_SP};
    /* caml_runstack linking a fiber to its parent: mov handler(%rax),%r11;
     * mov %rcx,parent(%r11). */
    const unsigned char runstack[] = {0x4c, 0x8b, 0x58, SI_HANDLER, 0x49, 0x89, 0x4b, SH_PARENT};
    if (!code_has("caml_c_call", c_call, sizeof c_call, 64) ||
        !code_has("caml_runstack", runstack, sizeof runstack, 128)) {
        snprintf(why, whylen,
                 "OCaml %s runtime: caml_c_call/caml_runstack do not use the domain state and "
                 "stack offsets this flamme reads (a modified or newer runtime?)",
                 r->name);
        return NULL;
    }
    /* Caml_state->id: caml_reset_young_limit(dom_st) indexes all_domains
     * by dom_st->id, its first int read through its argument. */
    long id_off = first_index_load_rdi("caml_reset_young_limit", 64);
    if (id_off != r->ds_id) {
        snprintf(why, whylen,
                 "OCaml %s runtime: caml_reset_young_limit reads the domain id at offset %ld, "
                 "not at %d (a modified or newer runtime?)",
                 r->name, id_off, r->ds_id);
        return NULL;
    }
    flamme_ocaml_ds_id = r->ds_id;
    flamme_ocaml_ds_local_roots = r->ds_local_roots;
    flamme_ocaml_ds_unique_id = r->ds_unique_id;
    flamme_ocaml_ds_stat_promoted = r->ds_stat_promoted;
    flamme_ocaml_ds_stat_major = r->ds_stat_major;
    return r->name;
}
