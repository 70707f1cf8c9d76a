"""The work queue of self-hosted environments: work items and the workers that poll them."""

import django.db.models.deletion
import registry.core.ids
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agent_sessions', '0003_event_text_search'),
        ('environments', '0001_initial'),
        ('workspaces', '0003_staffmembership'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkItem',
            fields=[
                ('id', models.CharField(default=registry.core.ids.IdFactory('work'), editable=False, max_length=64, primary_key=True, serialize=False)),
                ('session_ref', models.CharField(max_length=64)),
                ('state', models.CharField(choices=[('queued', 'Queued'), ('starting', 'Starting'), ('active', 'Active'), ('stopping', 'Stopping'), ('stopped', 'Stopped')], default='queued', max_length=16)),
                ('metadata', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField()),
                ('polled_at', models.DateTimeField(blank=True, null=True)),
                ('worker_id', models.CharField(blank=True, max_length=256, null=True)),
                ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('latest_heartbeat_at', models.DateTimeField(blank=True, null=True)),
                ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                ('ttl_seconds', models.PositiveIntegerField(default=0)),
                ('stop_requested_at', models.DateTimeField(blank=True, null=True)),
                ('stopped_at', models.DateTimeField(blank=True, null=True)),
                ('environment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='environments.environment')),
                ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='workspaces.workspace')),
            ],
            options={
                'indexes': [models.Index(fields=['environment', 'state', 'created_at'], name='work_queue_idx'), models.Index(fields=['environment', 'created_at', 'id'], name='work_list_idx'), models.Index(fields=['session_ref', 'created_at'], name='work_session_idx')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('state__in', ['queued', 'starting', 'active'])), fields=('session_ref',), name='work_one_live_per_session')],
            },
        ),
        migrations.CreateModel(
            name='WorkPoller',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('worker_id', models.CharField(max_length=256)),
                ('polled_at', models.DateTimeField()),
                ('environment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='environments.environment')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('environment', 'worker_id'), name='work_poller_unique')],
            },
        ),
    ]
