/* pc_opt: the flags module's name in 0.1, kept as aliases of pc_flags.h until 0.2 (the
 * name read too much like pc_optim, the SGD module). New code includes
 * pipecompress/pc_flags.h and calls pc_flags_*; a program written against 0.1 compiles
 * and links unchanged: the types and constants below are pc_flags.h's under their old
 * names, and the functions are exported wrappers of pc_flags_* (src/base/pc_flags.c). */
#ifndef PC_OPT_H
#define PC_OPT_H

#include "pipecompress/pc_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The 0.1 tags (enum pc_opt_type, struct pc_opt, struct pc_opt_group) name pc_flags.h's. */
#define pc_opt_type  pc_flags_type
#define pc_opt       pc_flags
#define pc_opt_group pc_flags_group

typedef pc_flags_type_t pc_opt_type_t;
typedef pc_flags_check_fn pc_opt_check_fn;
typedef pc_flags_t pc_opt_t;
typedef pc_flags_group_t pc_opt_group_t;

#define PC_OPT_INT         PC_FLAGS_INT
#define PC_OPT_INT64       PC_FLAGS_INT64
#define PC_OPT_SIZE        PC_FLAGS_SIZE
#define PC_OPT_DOUBLE      PC_FLAGS_DOUBLE
#define PC_OPT_STRING      PC_FLAGS_STRING
#define PC_OPT_CHOICE      PC_FLAGS_CHOICE
#define PC_OPT_FLAG        PC_FLAGS_FLAG
#define PC_OPT_HELP        PC_FLAGS_HELP
#define PC_OPT_VERSION     PC_FLAGS_VERSION
#define PC_OPT_CHOICE_TEXT PC_FLAGS_CHOICE_TEXT

/* pc_flags_parse, pc_flags_usage, pc_flags_finish, pc_flags_print and pc_flags_set under
 * their 0.1 names; thread-safety and ownership as there. */
int pc_opt_parse(const pc_opt_group_t *groups, size_t ngroups, int argc, char **argv,
                 int *first_operand, char *err, size_t errlen);
void pc_opt_usage(const pc_opt_group_t *groups, size_t ngroups, FILE *out);
int pc_opt_finish(int rc, const pc_opt_group_t *groups, size_t ngroups, const char *prog,
                  const char *usage, const char *err, int speak, FILE *out, FILE *errs);
void pc_opt_print(const pc_opt_group_t *groups, size_t ngroups, const char *prefix, FILE *out);
int pc_opt_set(const pc_opt_t *opt, void *dst, const char *value, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_OPT_H */
