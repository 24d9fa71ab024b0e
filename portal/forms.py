"""The forms of the portal's own pages (the fleet settings pages have theirs in manage_forms)."""

from __future__ import annotations

from django import forms

from tenants.choices import NotificationTopic, WebhookFormat
from tenants.models import ALWAYS_IN_APP_TOPICS


class NotificationSettingsForm(forms.Form):
    """Which topics reach the user on each channel; the fields are the service's arguments."""

    in_app_topics = forms.MultipleChoiceField(choices=NotificationTopic.choices, required=False)
    email_enabled = forms.BooleanField(required=False, label="Send me email")
    email_topics = forms.MultipleChoiceField(choices=NotificationTopic.choices, required=False)
    webhook_url = forms.CharField(
        required=False,
        max_length=500,
        label="Webhook URL",
        help_text=(
            "A Slack incoming webhook, a Teams workflow or any https endpoint on the public "
            "internet; leave empty for none."
        ),
        widget=forms.URLInput(attrs={"class": "form-control", "placeholder": "https://"}),
    )
    webhook_format = forms.ChoiceField(
        choices=WebhookFormat.choices,
        label="Message format",
        widget=forms.Select(attrs={"class": "form-select"}),
    )
    webhook_topics = forms.MultipleChoiceField(choices=NotificationTopic.choices, required=False)

    def clean_in_app_topics(self) -> list[str]:
        return sorted({*self.cleaned_data["in_app_topics"], *ALWAYS_IN_APP_TOPICS})
