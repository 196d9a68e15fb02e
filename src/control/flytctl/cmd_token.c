/* flytctl node|vm rotate-token|revoke-token, session revoke-tokens (docs/api.md, "Rotating
 * and revoking tokens"). */
#include "ctl.h"

#include <string.h>

const struct ctl_opt ctl_rotate_opts[] = {
    {"--grace", "DURATION", "how long the previous token stays valid (default 10m; 0: not at "
                            "all); ms/s/m/h"},
    {NULL, NULL, NULL}};
const struct ctl_opt ctl_revoke_opts[] = {
    {"--previous", NULL, "only the previous token (a rotation's grace ends now)"},
    {NULL, NULL, NULL}};

/* "nodes" or "vms": the path of the command's group */
static const char *collection(const struct ctl_cmd *cmd)
{
    return strcmp(cmd->group, "node") == 0 ? "nodes" : "vms";
}

int ctl_rotate_token(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    const char *grace = ctl_opt(cmd, a, "--grace");
    long grace_ms = 600000;
    if (grace && ctl_arg_duration(cmd, "--grace", grace, &grace_ms))
        return CTL_EUSAGE;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/%s/%s/rotate-token", collection(cmd), a->pos[0]);
    json_t *body = json_pack("{s:I}", "grace_s", (json_int_t)(grace_ms / 1000)), *ans;
    int rc = ctl_call(c, "POST", path, body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else {
        const char *until = ctl_js(ans, "previous_valid_until");
        printf("New token of %s %s (shown only this once; the cluster manager keeps only its "
               "hash):\n\n    %s\n\n", cmd->group, a->pos[0], ctl_js(ans, "token"));
        if (json_is_string(json_object_get(ans, "previous_valid_until")))
            printf("The previous token stays valid until %s. Write the new one into the %s's "
                   "token file (%s) before then;\nthe daemon reads it again on SIGHUP, or by "
                   "itself at the first call refused with the old one.\n", until, cmd->group,
                   strcmp(cmd->group, "node") == 0 ? "node_token_file" : "vm_token_file");
        else
            printf("The previous token is refused from now on.\n");
    }
    json_decref(ans);
    return CTL_OK;
}

int ctl_revoke_token(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    int previous = ctl_opt(cmd, a, "--previous") != NULL;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/%s/%s/revoke-token", collection(cmd), a->pos[0]);
    json_t *body = json_pack("{s:b}", "previous_only", previous), *ans;
    int rc = ctl_call(c, "POST", path, body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json)
        ctl_print_json(ans);
    else if (previous)
        printf("The previous token of %s %s is refused from now on.\n", cmd->group, a->pos[0]);
    else
        printf("Every token of %s %s is refused from now on; 'flytctl %s rotate-token %s' "
               "gives it a new one.\n", cmd->group, a->pos[0], cmd->group, a->pos[0]);
    json_decref(ans);
    return CTL_OK;
}

int ctl_session_revoke_tokens(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/sessions/%s/revoke-tokens", a->pos[0]);
    json_t *ans;
    int rc = ctl_call(c, "POST", path, NULL, 1, &ans);
    if (rc)
        return rc;
    if (c->json)
        ctl_print_json(ans);
    else
        printf("The tokens issued for session %s so far are refused by its server from now "
               "on;\nconnections already admitted carry on, and its process gets a new token "
               "when it asks again.\n", a->pos[0]);
    json_decref(ans);
    return CTL_OK;
}
