/* Test driver for generated MicroPython user C modules (tests only): a tiny
   implementation of the stand-in API in py/*.h -- objects on the C heap,
   exceptions via longjmp -- and a main() that calls the module's run()
   through its function object, as MicroPython's VM would.

   Build: cc -I. -I<dir of fake_qstrdefs.h> -I<module dir> -DMOD_OBJ=<m>_user_cmodule
             driver.c mod<m>.c
   Usage: driver attrs
          driver <kind> <out.bin> <in0.bin> [<in1.bin> ...]
   kind: bytes | bytearray | array:<typecode> (raw file bytes) | list_f | tuple_f
         (file holds float32 values) | list_i (file holds int32 values) | none
   Prints "OK <typecode>..." and writes the output arrays' bytes to out.bin,
   or prints "EXC <type>: <message>" when run() raises. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "py/runtime.h"
#include "py/objarray.h"
#include "py/objtuple.h"

struct _mp_obj_type_t {
    const char *name;
};

#define TYPE(n) const mp_obj_type_t mp_type_##n = {#n}
TYPE(list);
TYPE(tuple);
TYPE(bytes);
TYPE(bytearray);
TYPE(array);
TYPE(float);
TYPE(module);
TYPE(dict);
TYPE(fun_builtin_0);
TYPE(fun_builtin_1);
TYPE(fun_builtin_var);
TYPE(ValueError);
TYPE(TypeError);
TYPE(RuntimeError);
TYPE(NoneType);
const mp_obj_none_t mp_const_none_obj = {&mp_type_NoneType};

typedef struct {
    mp_obj_base_t base;
    mp_float_t value;
} fake_float_t;

typedef struct {
    mp_obj_base_t base;
    size_t len;
    mp_obj_t *items;
} fake_list_t;

static jmp_buf raise_point;
static char exc_text[512];
static const char *exc_type;

static NORETURN void raise(const mp_obj_type_t *t, const char *fmt, va_list ap)
{
    exc_type = t->name;
    vsnprintf(exc_text, sizeof exc_text, fmt, ap);
    longjmp(raise_point, 1);
}

void mp_raise_msg_varg(const mp_obj_type_t *exc_type_, mp_rom_error_text_t fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    raise(exc_type_, fmt, ap);
}

static NORETURN void raise_plain(const mp_obj_type_t *t, const char *msg)
{
    exc_type = t->name;
    snprintf(exc_text, sizeof exc_text, "%s", msg);
    longjmp(raise_point, 1);
}

void mp_raise_ValueError(mp_rom_error_text_t msg) { raise_plain(&mp_type_ValueError, msg); }
void mp_raise_TypeError(mp_rom_error_text_t msg) { raise_plain(&mp_type_TypeError, msg); }

static int small_int(mp_const_obj_t o) { return (((mp_int_t)o) & 1) != 0; }
static mp_int_t small_int_value(mp_const_obj_t o) { return ((mp_int_t)o) >> 1; }

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

void mp_get_buffer_raise(mp_obj_t obj, mp_buffer_info_t *bufinfo, mp_uint_t flags)
{
    (void)flags;
    if (mp_obj_is_type(obj, &mp_type_bytes) || mp_obj_is_type(obj, &mp_type_bytearray) ||
        mp_obj_is_type(obj, &mp_type_array)) {
        mp_obj_array_t *a = (mp_obj_array_t *)MP_OBJ_TO_PTR(obj);
        bufinfo->buf = a->items;
        bufinfo->len = a->len * itemsize((int)a->typecode);
        bufinfo->typecode = mp_obj_is_type(obj, &mp_type_bytes) ? 'B' : (int)a->typecode;
        return;
    }
    raise_plain(&mp_type_TypeError, "object with buffer protocol required");
}

mp_float_t mp_obj_get_float(mp_obj_t o)
{
    if (small_int(o)) return (mp_float_t)small_int_value(o);
    if (mp_obj_is_type(o, &mp_type_float)) return ((fake_float_t *)MP_OBJ_TO_PTR(o))->value;
    raise_plain(&mp_type_TypeError, "can't convert to float");
}

mp_int_t mp_obj_get_int(mp_const_obj_t o)
{
    if (small_int(o)) return small_int_value(o);
    raise_plain(&mp_type_TypeError, "can't convert to int");
}

void mp_obj_get_array(mp_obj_t o, size_t *len, mp_obj_t **items)
{
    if (mp_obj_is_type(o, &mp_type_list) || mp_obj_is_type(o, &mp_type_tuple)) {
        fake_list_t *l = (fake_list_t *)MP_OBJ_TO_PTR(o);
        *len = l->len;
        *items = l->items;
        return;
    }
    raise_plain(&mp_type_TypeError, "object not a list or tuple");
}

static mp_obj_t new_buffer(const mp_obj_type_t *t, int tc, const void *data, size_t bytes)
{
    mp_obj_array_t *a = (mp_obj_array_t *)malloc(sizeof *a);
    a->base.type = t;
    a->typecode = (size_t)tc;
    a->len = bytes / itemsize(tc);
    a->items = malloc(bytes ? bytes : 1);
    memcpy(a->items, data, bytes);
    return MP_OBJ_FROM_PTR(a);
}

mp_obj_t mp_obj_new_bytes(const byte *data, size_t len) { return new_buffer(&mp_type_bytes, 'B', data, len); }

mp_obj_t mp_obj_new_tuple(size_t n, const mp_obj_t *items)
{
    fake_list_t *l = (fake_list_t *)malloc(sizeof *l);
    l->base.type = &mp_type_tuple;
    l->len = n;
    l->items = (mp_obj_t *)malloc(n * sizeof(mp_obj_t));
    memcpy(l->items, items, n * sizeof(mp_obj_t));
    return MP_OBJ_FROM_PTR(l);
}

/* Only array(typecode, bytes) is called by the modules. */
mp_obj_t mp_call_function_n_kw(mp_obj_t fun, size_t n_args, size_t n_kw, const mp_obj_t *args)
{
    const char *tc;
    mp_obj_array_t *src;
    if (fun != MP_OBJ_FROM_PTR(&mp_type_array) || n_args != 2 || n_kw != 0 || (((mp_uint_t)args[0]) & 7) != 2 ||
        !mp_obj_is_type(args[1], &mp_type_bytes)) {
        fprintf(stderr, "driver: unexpected call\n");
        exit(2);
    }
    tc = fake_qstr_names[((mp_uint_t)args[0]) >> 3];
    src = (mp_obj_array_t *)MP_OBJ_TO_PTR(args[1]);
    if (strlen(tc) != 1 || itemsize(tc[0]) == 0 || src->len % itemsize(tc[0]) != 0) {
        fprintf(stderr, "driver: bad array('%s', %zu bytes)\n", tc, src->len);
        exit(2);
    }
    return new_buffer(&mp_type_array, tc[0], src->items, src->len);
}

static const char *qstr_name(mp_const_obj_t o) { return fake_qstr_names[((mp_uint_t)o) >> 3]; }

static void print_obj(mp_const_obj_t o)
{
    if (small_int(o)) {
        printf("%ld", (long)small_int_value(o));
    } else if ((((mp_uint_t)o) & 7) == 2) {
        printf("'%s'", qstr_name(o));
    } else if (mp_obj_is_type(o, &mp_type_float)) {
        printf("%.9g", (double)((const fake_float_t *)o)->value);
    } else if (mp_obj_is_type(o, &mp_type_tuple)) {
        const mp_rom_obj_tuple_t *t = (const mp_rom_obj_tuple_t *)o;
        size_t i;
        printf("(");
        for (i = 0; i < t->len; ++i) {
            print_obj(t->items[i]);
            printf(i + 1 < t->len || t->len == 1 ? ", " : "");
        }
        printf(")");
    } else if (o == (mp_const_obj_t)&mp_const_none_obj) {
        printf("None");
    } else {
        printf("'<%s>'", ((const mp_obj_base_t *)o)->type->name);
    }
}

extern const mp_obj_module_t MOD_OBJ;

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

static mp_obj_t make_input(const char *kind, const char *path)
{
    size_t len, i;
    unsigned char *data = read_file(path, &len);
    if (strcmp(kind, "bytes") == 0) return mp_obj_new_bytes(data, len);
    if (strcmp(kind, "bytearray") == 0) return new_buffer(&mp_type_bytearray, BYTEARRAY_TYPECODE, data, len);
    if (strncmp(kind, "array:", 6) == 0) return new_buffer(&mp_type_array, kind[6], data, len);
    if (strcmp(kind, "list_f") == 0 || strcmp(kind, "tuple_f") == 0 || strcmp(kind, "list_i") == 0) {
        fake_list_t *l = (fake_list_t *)malloc(sizeof *l);
        l->base.type = kind[0] == 't' ? &mp_type_tuple : &mp_type_list;
        l->len = len / 4;
        l->items = (mp_obj_t *)malloc((l->len + 1) * sizeof(mp_obj_t));
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
    if (strcmp(kind, "none") == 0) return MP_OBJ_FROM_PTR(&mp_const_none_obj);
    fprintf(stderr, "driver: unknown kind %s\n", kind);
    exit(2);
}

static void write_output(FILE *f, mp_obj_t o)
{
    mp_obj_array_t *a;
    if (!mp_obj_is_type(o, &mp_type_array)) {
        printf(" not-an-array");
        return;
    }
    a = (mp_obj_array_t *)MP_OBJ_TO_PTR(o);
    printf(" %c", (int)a->typecode);
    fwrite(a->items, 1, a->len * itemsize((int)a->typecode), f);
}

int main(int argc, char **argv)
{
    const mp_obj_dict_t *g = MOD_OBJ.globals;
    const mp_rom_map_elem_t *table = (const mp_rom_map_elem_t *)g->map.table;
    mp_const_obj_t run = NULL;
    mp_obj_t args[8];
    mp_obj_t volatile result = NULL;
    size_t i, n_in;
    if (MOD_OBJ.base.type != &mp_type_module || g->base.type != &mp_type_dict) return 2;
    for (i = 0; i < g->map.used; ++i) {
        if (strcmp(qstr_name(table[i].key), "run") == 0) run = table[i].value;
    }
    if (argc >= 2 && strcmp(argv[1], "attrs") == 0) {
        for (i = 0; i < g->map.used; ++i) {
            printf("%s = ", qstr_name(table[i].key));
            print_obj(table[i].value);
            printf("\n");
        }
        return 0;
    }
    if (argc < 3 || run == NULL) return 2;
    n_in = (size_t)argc - 3;
    for (i = 0; i < n_in && i < 8; ++i) args[i] = make_input(argv[1], argv[3 + i]);
    if (setjmp(raise_point) == 0) {
        const mp_obj_base_t *fun = (const mp_obj_base_t *)run;
        if (fun->type == &mp_type_fun_builtin_1) {
            if (n_in != 1) { printf("EXC TypeError: function takes 1 positional arguments\n"); return 0; }
            result = ((const mp_obj_fun_builtin_fixed_t *)run)->fun1(args[0]);
        } else if (fun->type == &mp_type_fun_builtin_0) {
            result = ((const mp_obj_fun_builtin_fixed_t *)run)->fun0();
        } else {
            const mp_obj_fun_builtin_var_t *v = (const mp_obj_fun_builtin_var_t *)run;
            if (n_in < (v->sig >> 17) || n_in > ((v->sig >> 1) & 0xFFFF)) {
                printf("EXC TypeError: function takes %u positional arguments\n", (unsigned)(v->sig >> 17));
                return 0;
            }
            result = v->var(n_in, args);
        }
    } else {
        printf("EXC %s: %s\n", exc_type, exc_text);
        return 0;
    }
    {
        FILE *f = fopen(argv[2], "wb");
        printf("OK");
        if (mp_obj_is_type(result, &mp_type_tuple)) {
            fake_list_t *t = (fake_list_t *)MP_OBJ_TO_PTR(result);
            printf(" tuple");
            for (i = 0; i < t->len; ++i) write_output(f, t->items[i]);
        } else {
            write_output(f, result);
        }
        printf("\n");
        fclose(f);
    }
    return 0;
}
