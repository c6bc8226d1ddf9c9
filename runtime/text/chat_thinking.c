#include "runtime/text/chat_thinking.h"

#include "runtime/base/error.h"

int chat_thinking(chat_template_id t, chat_think_ask ask, chat_reply_start start, bool *on) {
    switch (chat_template_think_mode(t)) {
    case CHAT_THINK_NEVER: *on = false; return 0;
    case CHAT_THINK_ALWAYS:
        if (start != CHAT_REPLY_FREE) /* the prompt opened a think block: the reply is reasoning first */
            return cd_fail("%s cannot be had from %s: its replies always open with reasoning",
                           start == CHAT_REPLY_JSON ? "a JSON reply" : "a demanded tool call", chat_template_name(t));
        *on = true;
        return 0;
    case CHAT_THINK_SWITCH: break;
    }
    if (start == CHAT_REPLY_JSON && ask == CHAT_THINK_ASK_ON) /* it would open with <think>, which is not JSON */
        return cd_fail("a JSON response_format needs enable_thinking off");
    *on = ask == CHAT_THINK_ASK_DEFAULT ? start == CHAT_REPLY_FREE : ask == CHAT_THINK_ASK_ON;
    return 0;
}

int chat_think_ask_of(const json_t *v, chat_think_ask *ask) {
    if (!v || json_is_null(v)) *ask = CHAT_THINK_ASK_DEFAULT;
    else if (json_is_boolean(v)) *ask = json_is_true(v) ? CHAT_THINK_ASK_ON : CHAT_THINK_ASK_OFF;
    else return -1;
    return 0;
}
