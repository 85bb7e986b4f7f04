/* The process-wide registry of custom node types. Types are never removed,
 * so a pointer handed out stays valid; only the list needs the lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

static pthread_mutex_t ktree_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_node_type *ktree_registry; /* guarded by ktree_registry_lock */

static kiln_node_type *ktree_find_locked(const char *name) {
  for (kiln_node_type *t = ktree_registry; t; t = t->next)
    if (strcmp(t->name, name) == 0) return t;
  return NULL;
}

static void ktree_type_free(kiln_node_type *t) {
  if (!t) return;
  for (size_t i = 0; t->fields && i < t->n_fields; i++) free(t->fields[i]);
  for (size_t i = 0; t->meta && i < t->n_meta; i++) free(t->meta[i]);
  free(t->fields);
  free(t->meta);
  free(t->name);
  free(t);
}

/* Copies n names into *out, checking each against the ones before it and
 * against `others` (n_others names already copied). */
static kiln_status ktree_copy_names(const char *op, const char *what, size_t n,
                                    const char *const *names, char **others, size_t n_others,
                                    char ***out) {
  if (n > 0 && !names) return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL for %zu", op, what, n);
  if (n == 0) return KILN_OK;
  char **copy = calloc(n, sizeof *copy);
  if (!copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  *out = copy; /* the caller frees it with the type, complete or not */
  for (size_t i = 0; i < n; i++) {
    if (!names[i] || !names[i][0])
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s %zu is %s", op, what, i,
                        names[i] ? "empty" : "NULL");
    for (size_t j = 0; j < i + n_others; j++) {
      const char *seen = j < n_others ? others[j] : copy[j - n_others];
      if (strcmp(seen, names[i]) == 0)
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: the name '%s' is used twice", op, names[i]);
    }
    if (!(copy[i] = kcore_strdup(names[i])))
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  }
  return KILN_OK;
}

/* Adds t under its name unless the name is taken; on failure frees t. */
static kiln_status ktree_register(const char *op, kiln_node_type *t, const kiln_node_type **out) {
  pthread_mutex_lock(&ktree_registry_lock);
  bool taken = ktree_find_locked(t->name) != NULL;
  if (!taken) {
    t->next = ktree_registry;
    ktree_registry = t;
  }
  pthread_mutex_unlock(&ktree_registry_lock);
  if (taken) {
    kiln_status st = kcore_fail(KILN_ERR_ARGUMENT,
                                "%s: a node type named '%s' is already registered", op, t->name);
    ktree_type_free(t);
    return st;
  }
  if (out) *out = t;
  return KILN_OK;
}

static kiln_status ktree_type_new(const char *op, const char *name, kiln_node_type **out) {
  if (!name || !name[0])
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: the name is %s", op, name ? "empty" : "NULL");
  kiln_node_type *t = calloc(1, sizeof *t);
  if (!t || !(t->name = kcore_strdup(name))) {
    free(t);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  }
  *out = t;
  return KILN_OK;
}

kiln_status kiln_register_node(const char *name, const kiln_node_callbacks *cb,
                               const kiln_node_type **out) {
  const char *op = "kiln_register_node";
  if (!cb) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the callbacks are NULL", op);
  if (!cb->flatten || !cb->unflatten)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: the %s callback is NULL", op,
                      cb->flatten ? "unflatten" : "flatten");
  kiln_node_type *t = NULL;
  kiln_status st = ktree_type_new(op, name, &t);
  if (st) return st;
  t->cb = *cb;
  return ktree_register(op, t, out);
}

static kiln_status ktree_register_dataclass(const char *op, const char *name, size_t n_fields,
                                            const char *const *fields, size_t n_meta,
                                            const char *const *meta_fields,
                                            const kiln_node_type **out) {
  kiln_node_type *t = NULL;
  kiln_status st = ktree_type_new(op, name, &t);
  if (st) return st;
  t->dataclass = true;
  t->n_fields = n_fields;
  t->n_meta = n_meta;
  st = ktree_copy_names(op, "field", n_fields, fields, NULL, 0, &t->fields);
  if (!st)
    st = ktree_copy_names(op, "meta field", n_meta, meta_fields, t->fields, n_fields, &t->meta);
  if (st) {
    ktree_type_free(t);
    return st;
  }
  return ktree_register(op, t, out);
}

kiln_status kiln_register_dataclass_meta(const char *name, size_t n_fields,
                                         const char *const *fields, size_t n_meta,
                                         const char *const *meta_fields,
                                         const kiln_node_type **out) {
  return ktree_register_dataclass("kiln_register_dataclass_meta", name, n_fields, fields, n_meta,
                                  meta_fields, out);
}

kiln_status kiln_register_dataclass(const char *name, size_t n_fields, const char *const *fields,
                                    const kiln_node_type **out) {
  return ktree_register_dataclass("kiln_register_dataclass", name, n_fields, fields, 0, NULL, out);
}

const kiln_node_type *kiln_node_type_find(const char *name) {
  if (!name) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_node_type_find: the name is NULL");
    return NULL;
  }
  pthread_mutex_lock(&ktree_registry_lock);
  const kiln_node_type *t = ktree_find_locked(name);
  pthread_mutex_unlock(&ktree_registry_lock);
  if (!t) kcore_fail(KILN_ERR_ARGUMENT, "kiln_node_type_find: no node type is named '%s'", name);
  return t;
}

const char *kiln_node_type_name(const kiln_node_type *t) {
  if (!t) kcore_fail(KILN_ERR_ARGUMENT, "kiln_node_type_name: the node type is NULL");
  return t ? t->name : NULL;
}

kiln_status ktree_aux_check(const char *op, const kiln_node_type *type, const void *aux,
                            size_t size) {
  if (!type->dataclass || type->n_meta == 0) return KILN_OK;
  const char *p = aux;
  size_t strings = 0;
  for (size_t i = 0; i < size; i++) strings += p[i] == '\0';
  if (strings != type->n_meta || size == 0 || p[size - 1] != '\0')
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: dataclass %s has %zu meta field(s): its aux data must be %zu "
                      "NUL-terminated string(s), got %zu byte(s)",
                      op, type->name, type->n_meta, type->n_meta, size);
  return KILN_OK;
}
