/* Test driver for generated MicroPython user C modules (tests only): the
   "port" runtime behind the stand-in headers in py/ -- objects on the C heap,
   exceptions through the stand-in's setjmp NLR -- and a main() that calls the
   module's run() through its function object, as MicroPython's VM does.

   Build: cc -Ipy/.. -Iport -I<dir holding genhdr/> -I<module dir>
             -DMOD_OBJ=mod<m>_user_cmodule driver.c mod<m>.c
   Usage: driver attrs
          driver <kind> <out.bin> <in0.bin> [<in1.bin> ...]
   kind: bytes | bytearray | array:<typecode> (raw file bytes) | str (the file's
         bytes as a str) | list_f | tuple_f (file holds float32 values) |
         list_i (file holds int32 values) | list_bad (as many None as the file
         holds float32 values) | none |
         int | dict
         reenter:<kind>: as <kind>, and while run() reads input 0 the driver
         calls run() again (what a second thread would do): that inner call
         must raise the module's busy RuntimeError ("REENTER ..." line)
         release:<kind>: first run() with a list of None (TypeError), then
         run() with <kind>: the arena must have been released by the error
   Prints "OK <typecode>..." and writes the output arrays' bytes to out.bin,
   or prints "EXC <type>: <message>" when run() raises. Exits 3 when atomic
   sections do not pair up, or a run() returned without using one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "py/runtime.h"
#include "py/objtuple.h"
#include "py/binary.h"
#include "py/mphal.h"

struct _mp_obj_type_t {
    const char *name;
};

#define TYPE(n) const mp_obj_type_t mp_type_##n = {#n}
TYPE(NoneType);
TYPE(bool);
TYPE(int);
TYPE(str);
TYPE(bytes);
TYPE(bytearray);
TYPE(float);
TYPE(tuple);
TYPE(list);
TYPE(dict);
TYPE(array);
TYPE(fun_builtin_0);
TYPE(fun_builtin_1);
TYPE(fun_builtin_var);
TYPE(module);
TYPE(RuntimeError);
TYPE(TypeError);
TYPE(ValueError);

/* qstr id -> text, in the enum's order (static qstrs, then the others) */
static const char *const qstr_names[] = {
#define QDEF0(id, hash, len, str) str,
#define QDEF1(id, hash, len, str)
#include "genhdr/qstrdefs.generated.h"
#undef QDEF0
#undef QDEF1
#define QDEF0(id, hash, len, str)
#define QDEF1(id, hash, len, str) str,
#include "genhdr/qstrdefs.generated.h"
#undef QDEF0
#undef QDEF1
};

typedef struct {
    mp_obj_base_t base;
    mp_float_t value;
} fake_float_t;

/* list, tuple (this driver's own layout for both) */
typedef struct {
    mp_obj_base_t base;
    size_t len;
    mp_obj_t *items;
} fake_list_t;

/* bytes, str, bytearray, array */
typedef struct {
    mp_obj_base_t base;
    int typecode;
    size_t len; /* elements */
    void *items;
} fake_array_t;

typedef struct {
    mp_obj_base_t base;
    char text[512];
} fake_exc_t;

static const fake_list_t empty_dict = {{&mp_type_dict}, 0, NULL};

/* --- NLR (setjmp) -------------------------------------------------------- */

static nlr_buf_t *nlr_top;

unsigned int nlr_push_tail(nlr_buf_t *top)
{
    top->prev = nlr_top;
    nlr_top = top;
    return 0;
}

void nlr_pop(void)
{
    nlr_top = nlr_top->prev;
}

void nlr_jump(void *val)
{
    nlr_buf_t *top = nlr_top;
    if (top == NULL) {
        fprintf(stderr, "driver: exception with no handler\n");
        exit(2);
    }
    top->ret_val = val;
    nlr_top = top->prev;
    longjmp(top->jmpbuf, 1);
}

/* --- atomic sections ------------------------------------------------------ */

static int atomic_depth, atomic_count, ok_calls;

mp_uint_t fake_atomic_begin(void)
{
    ++atomic_depth;
    ++atomic_count;
    return 0x5a5au;
}

void fake_atomic_end(mp_uint_t state)
{
    if (state != 0x5a5au || atomic_depth != 1) {
        fprintf(stderr, "driver: atomic section end without its begin\n");
        exit(3);
    }
    --atomic_depth;
}

/* --- exceptions ------------------------------------------------------------ */

static MP_NORETURN void raise_text(const mp_obj_type_t *t, const char *fmt, va_list ap)
{
    fake_exc_t *e = (fake_exc_t *)malloc(sizeof *e);
    e->base.type = t;
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    nlr_jump(e);
}

void mp_raise_msg_varg(const mp_obj_type_t *exc_type, mp_rom_error_text_t fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    raise_text(exc_type, fmt, ap);
}

static MP_NORETURN void raise_plain(const mp_obj_type_t *t, const char *msg)
{
    fake_exc_t *e = (fake_exc_t *)malloc(sizeof *e);
    e->base.type = t;
    snprintf(e->text, sizeof e->text, "%s", msg ? msg : "");
    nlr_jump(e);
}

void mp_raise_msg(const mp_obj_type_t *exc_type, mp_rom_error_text_t msg) { raise_plain(exc_type, msg); }
void mp_raise_ValueError(mp_rom_error_text_t msg) { raise_plain(&mp_type_ValueError, msg); }
void mp_raise_TypeError(mp_rom_error_text_t msg) { raise_plain(&mp_type_TypeError, msg); }

/* --- objects ---------------------------------------------------------------- */

static size_t itemsize(int tc)
{
    switch (tc) {
    case 'b': case 'B': case BYTEARRAY_TYPECODE: return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': return 8;
    default: return 0;
    }
}

static int is_buffer_type(mp_const_obj_t o)
{
    return mp_obj_is_obj(o) && (((const mp_obj_base_t *)o)->type == &mp_type_bytes ||
                                ((const mp_obj_base_t *)o)->type == &mp_type_str ||
                                ((const mp_obj_base_t *)o)->type == &mp_type_bytearray ||
                                ((const mp_obj_base_t *)o)->type == &mp_type_array);
}

/* As MicroPython: bytes and str report 'B', bytearray BYTEARRAY_TYPECODE,
   array its typecode; other objects have no buffer. */
bool mp_get_buffer(mp_obj_t obj, mp_buffer_info_t *bufinfo, mp_uint_t flags)
{
    if (is_buffer_type(obj)) {
        fake_array_t *a = (fake_array_t *)MP_OBJ_TO_PTR(obj);
        bufinfo->buf = a->items;
        bufinfo->len = a->len * itemsize(a->typecode);
        bufinfo->typecode = a->typecode;
        return true;
    }
    if (flags & MP_BUFFER_RAISE_IF_UNSUPPORTED) {
        raise_plain(&mp_type_TypeError, "object with buffer protocol required");
    }
    return false;
}

static mp_obj_t module_run(size_t n_in, mp_obj_t *args);
static int reenter_pending;
static mp_obj_t reenter_args[8];
static size_t reenter_n;

/* what another thread would do while this one is inside run() */
static void reenter(void)
{
    nlr_buf_t nlr;
    reenter_pending = 0;
    if (nlr_push(&nlr) == 0) {
        module_run(reenter_n, reenter_args);
        nlr_pop();
        printf("REENTER OK\n");
    } else {
        fake_exc_t *e = (fake_exc_t *)nlr.ret_val;
        printf("REENTER EXC %s: %s\n", e->base.type->name, e->text);
    }
}

bool mp_obj_get_float_maybe(mp_obj_t arg, mp_float_t *value)
{
    if (reenter_pending) {
        reenter();
    }
    if (mp_obj_is_small_int(arg)) {
        *value = (mp_float_t)MP_OBJ_SMALL_INT_VALUE(arg);
        return true;
    }
    if (mp_obj_is_exact_type(arg, &mp_type_float)) {
        *value = ((fake_float_t *)MP_OBJ_TO_PTR(arg))->value;
        return true;
    }
    return false;
}

bool mp_obj_get_int_maybe(mp_const_obj_t arg, mp_int_t *value)
{
    if (reenter_pending) {
        reenter();
    }
    if (mp_obj_is_small_int(arg)) {
        *value = MP_OBJ_SMALL_INT_VALUE(arg);
        return true;
    }
    return false;
}

void mp_obj_get_array(mp_obj_t o, size_t *len, mp_obj_t **items)
{
    if (mp_obj_is_exact_type(o, &mp_type_list) || mp_obj_is_exact_type(o, &mp_type_tuple)) {
        fake_list_t *l = (fake_list_t *)MP_OBJ_TO_PTR(o);
        *len = l->len;
        *items = l->items;
        return;
    }
    raise_plain(&mp_type_TypeError, "object not a list or tuple");
}

static mp_obj_t new_buffer(const mp_obj_type_t *t, int tc, const void *data, size_t bytes)
{
    fake_array_t *a = (fake_array_t *)malloc(sizeof *a);
    a->base.type = t;
    a->typecode = tc;
    a->len = bytes / itemsize(tc);
    a->items = malloc(bytes ? bytes : 1);
    memcpy(a->items, data, bytes);
    return MP_OBJ_FROM_PTR(a);
}

mp_obj_t mp_obj_new_bytes(const byte *data, size_t len) { return new_buffer(&mp_type_bytes, 'B', data, len); }

mp_obj_t mp_obj_new_tuple(size_t n, const mp_obj_t *items)
{
    mp_obj_tuple_t *t = (mp_obj_tuple_t *)malloc(sizeof *t + n * sizeof(mp_obj_t));
    t->base.type = &mp_type_tuple;
    t->len = n;
    memcpy(t->items, items, n * sizeof(mp_obj_t));
    return MP_OBJ_FROM_PTR(t);
}

/* Only array(typecode, bytes) is called by the modules. */
mp_obj_t mp_call_function_n_kw(mp_obj_t fun, size_t n_args, size_t n_kw, const mp_obj_t *args)
{
    const char *tc;
    fake_array_t *src;
    if (fun != MP_OBJ_FROM_PTR(&mp_type_array) || n_args != 2 || n_kw != 0 || !mp_obj_is_qstr(args[0]) ||
        !mp_obj_is_exact_type(args[1], &mp_type_bytes)) {
        fprintf(stderr, "driver: unexpected call\n");
        exit(2);
    }
    tc = qstr_names[MP_OBJ_QSTR_VALUE(args[0])];
    src = (fake_array_t *)MP_OBJ_TO_PTR(args[1]);
    if (strlen(tc) != 1 || itemsize(tc[0]) == 0 || src->len % itemsize(tc[0]) != 0) {
        fprintf(stderr, "driver: bad array('%s', %zu bytes)\n", tc, src->len);
        exit(2);
    }
    return new_buffer(&mp_type_array, tc[0], src->items, src->len);
}

/* --- the driver ---------------------------------------------------------------- */

static void print_obj(mp_const_obj_t o)
{
    if (mp_obj_is_small_int(o)) {
        printf("%ld", (long)MP_OBJ_SMALL_INT_VALUE(o));
    } else if (mp_obj_is_qstr(o)) {
        printf("'%s'", qstr_names[MP_OBJ_QSTR_VALUE(o)]);
    } else if (o == mp_const_none) {
        printf("None");
    } else if (mp_obj_is_exact_type(o, &mp_type_float)) {
        printf("%.9g", (double)((const fake_float_t *)o)->value);
    } else if (mp_obj_is_exact_type(o, &mp_type_tuple)) {
        const mp_rom_obj_tuple_t *t = (const mp_rom_obj_tuple_t *)o;
        size_t i;
        printf("(");
        for (i = 0; i < t->len; ++i) {
            print_obj(t->items[i]);
            printf(i + 1 < t->len || t->len == 1 ? ", " : "");
        }
        printf(")");
    } else {
        printf("'<%s>'", ((const mp_obj_base_t *)o)->type->name);
    }
}

extern const mp_obj_module_t MOD_OBJ;
static mp_rom_obj_t run_fun;

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;
    if (f == NULL) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (unsigned char *)malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { perror(path); exit(2); }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static mp_obj_t make_list(const mp_obj_type_t *t, size_t n)
{
    fake_list_t *l = (fake_list_t *)malloc(sizeof *l);
    l->base.type = t;
    l->len = n;
    l->items = (mp_obj_t *)malloc((n + 1) * sizeof(mp_obj_t));
    return MP_OBJ_FROM_PTR(l);
}

static mp_obj_t make_input(const char *kind, const char *path)
{
    size_t len, i;
    unsigned char *data = read_file(path, &len);
    if (strcmp(kind, "bytes") == 0) return mp_obj_new_bytes(data, len);
    if (strcmp(kind, "str") == 0) return new_buffer(&mp_type_str, 'B', data, len);
    if (strcmp(kind, "bytearray") == 0) return new_buffer(&mp_type_bytearray, BYTEARRAY_TYPECODE, data, len);
    if (strncmp(kind, "array:", 6) == 0) return new_buffer(&mp_type_array, kind[6], data, len);
    if (strcmp(kind, "none") == 0) return mp_const_none;
    if (strcmp(kind, "int") == 0) return MP_OBJ_NEW_SMALL_INT(5);
    if (strcmp(kind, "dict") == 0) return MP_OBJ_FROM_PTR(&empty_dict);
    if (strcmp(kind, "list_bad") == 0) {
        fake_list_t *l = (fake_list_t *)MP_OBJ_TO_PTR(make_list(&mp_type_list, len / 4));
        for (i = 0; i < l->len; ++i) l->items[i] = mp_const_none;
        return MP_OBJ_FROM_PTR(l);
    }
    if (strcmp(kind, "list_f") == 0 || strcmp(kind, "tuple_f") == 0 || strcmp(kind, "list_i") == 0) {
        fake_list_t *l = (fake_list_t *)MP_OBJ_TO_PTR(make_list(kind[0] == 't' ? &mp_type_tuple : &mp_type_list,
                                                                 len / 4));
        for (i = 0; i < l->len; ++i) {
            if (kind[5] == 'i') {
                int32_t v;
                memcpy(&v, data + 4 * i, 4);
                l->items[i] = MP_OBJ_NEW_SMALL_INT(v);
            } else {
                fake_float_t *f = (fake_float_t *)malloc(sizeof *f);
                float v;
                memcpy(&v, data + 4 * i, 4);
                f->base.type = &mp_type_float;
                f->value = (mp_float_t)v;
                l->items[i] = MP_OBJ_FROM_PTR(f);
            }
        }
        return MP_OBJ_FROM_PTR(l);
    }
    fprintf(stderr, "driver: unknown kind %s\n", kind);
    exit(2);
}

/* run(*args) through the function object, as the VM calls it (the VM checks
   the argument count of a fixed-arity function before calling) */
static mp_obj_t module_run(size_t n_in, mp_obj_t *args)
{
    const mp_obj_base_t *fun = (const mp_obj_base_t *)run_fun;
    if (fun->type == &mp_type_fun_builtin_1 || fun->type == &mp_type_fun_builtin_0) {
        if (n_in != (fun->type == &mp_type_fun_builtin_1 ? 1u : 0u)) {
            mp_raise_msg(&mp_type_TypeError, "function takes a different number of positional arguments");
        }
        return fun->type == &mp_type_fun_builtin_1 ? ((const mp_obj_fun_builtin_fixed_t *)fun)->fun._1(args[0])
                                                   : ((const mp_obj_fun_builtin_fixed_t *)fun)->fun._0();
    } else {
        const mp_obj_fun_builtin_var_t *v = (const mp_obj_fun_builtin_var_t *)fun;
        if (n_in < (v->sig >> 17) || n_in > ((v->sig >> 1) & 0xFFFF)) {
            mp_raise_msg(&mp_type_TypeError, "function takes a different number of positional arguments");
        }
        return v->fun.var(n_in, args);
    }
}

static void write_output(FILE *f, mp_obj_t o)
{
    fake_array_t *a;
    if (!mp_obj_is_exact_type(o, &mp_type_array)) {
        printf(" not-an-array");
        return;
    }
    a = (fake_array_t *)MP_OBJ_TO_PTR(o);
    printf(" %c", a->typecode);
    fwrite(a->items, 1, a->len * itemsize(a->typecode), f);
}

/* one run() with args; prints OK ... / EXC ... */
static void call(const char *out_path, size_t n_in, mp_obj_t *args)
{
    nlr_buf_t nlr;
    mp_obj_t result;
    if (nlr_push(&nlr) == 0) {
        result = module_run(n_in, args);
        nlr_pop();
    } else {
        fake_exc_t *e = (fake_exc_t *)nlr.ret_val;
        printf("EXC %s: %s\n", e->base.type->name, e->text);
        return;
    }
    {
        FILE *f = fopen(out_path, "wb");
        size_t i;
        ++ok_calls;
        printf("OK");
        if (mp_obj_is_exact_type(result, &mp_type_tuple)) {
            mp_obj_tuple_t *t = (mp_obj_tuple_t *)MP_OBJ_TO_PTR(result);
            printf(" tuple");
            for (i = 0; i < t->len; ++i) write_output(f, t->items[i]);
        } else {
            write_output(f, result);
        }
        printf("\n");
        fclose(f);
    }
}

int main(int argc, char **argv)
{
    const mp_obj_dict_t *g = MOD_OBJ.globals;
    const mp_rom_map_elem_t *table = (const mp_rom_map_elem_t *)g->map.table;
    mp_obj_t args[8];
    const char *kind;
    size_t i, n_in;
    if (MOD_OBJ.base.type != &mp_type_module || g->base.type != &mp_type_dict) return 2;
    for (i = 0; i < g->map.used; ++i) {
        if (strcmp(qstr_names[MP_OBJ_QSTR_VALUE(table[i].key)], "run") == 0) run_fun = table[i].value;
    }
    if (argc >= 2 && strcmp(argv[1], "attrs") == 0) {
        for (i = 0; i < g->map.used; ++i) {
            printf("%s = ", qstr_names[MP_OBJ_QSTR_VALUE(table[i].key)]);
            print_obj(table[i].value);
            printf("\n");
        }
        return 0;
    }
    if (argc < 3 || run_fun == NULL) return 2;
    n_in = (size_t)argc - 3;
    if (n_in > 8) return 2;
    kind = argv[1];
    if (strncmp(kind, "release:", 8) == 0) {
        mp_obj_t bad[8];
        for (i = 0; i < n_in; ++i) bad[i] = make_input("list_bad", argv[3 + i]);
        call(argv[2], n_in, bad);
        kind += 8;
    }
    if (strncmp(kind, "reenter:", 8) == 0) {
        kind += 8;
        for (i = 0; i < n_in; ++i) reenter_args[i] = make_input(kind, argv[3 + i]);
        reenter_n = n_in;
        reenter_pending = 1;
    }
    for (i = 0; i < n_in; ++i) args[i] = make_input(kind, argv[3 + i]);
    call(argv[2], n_in, args);
    if (reenter_pending) {
        printf("REENTER NOT TRIED\n");
    }
    if (atomic_depth != 0 || (ok_calls > 0 && atomic_count == 0)) {
        fprintf(stderr, "driver: %d atomic sections open, %d used\n", atomic_depth, atomic_count);
        return 3;
    }
    return 0;
}
